// Command hello is a static binary for the image test.
package main

func main() { println("hello") }
