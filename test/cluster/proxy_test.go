package cluster

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"
)

// TestProxyDelaysInOrder sends lines through the proxy to an echo server:
// they come back in order, each after at least twice the minimum delay.
func TestProxyDelaysInOrder(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					_, _ = fmt.Fprintln(c, sc.Text())
				}
				_ = c.Close()
			}()
		}
	}()
	p, err := StartProxy(ln.Addr().String(), 50*time.Millisecond, 100*time.Millisecond, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conn, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	start := time.Now()
	for i := range 5 {
		if _, err := fmt.Fprintf(conn, "line %d\n", i); err != nil {
			t.Fatal(err)
		}
	}
	sc := bufio.NewScanner(conn)
	for i := range 5 {
		if !sc.Scan() {
			t.Fatalf("connection ended after %d lines: %v", i, sc.Err())
		}
		if want := fmt.Sprintf("line %d", i); sc.Text() != want {
			t.Fatalf("got %q, want %q", sc.Text(), want)
		}
	}
	if rtt := time.Since(start); rtt < 100*time.Millisecond {
		t.Errorf("round trip took %s, want at least 100ms through two delayed directions", rtt)
	}
}

// TestProxyCuts closes connections on schedule: a client sees its
// connection end.
func TestProxyCuts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		var open []net.Conn // held open and silent until the listener closes
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range open {
					_ = c.Close()
				}
				return
			}
			open = append(open, c)
		}
	}()
	p, err := StartProxy(ln.Addr().String(), 0, 0, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conn, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from a silent server")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("connection was never cut")
	}
}
