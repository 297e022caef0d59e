package cluster

import (
	"os"
	"path/filepath"
	"testing"
)

func TestGrepKeepsTheLastMatchingLines(t *testing.T) {
	p := &Process{LogPath: filepath.Join(t.TempDir(), "log")}
	log := "a \"w-1\" one\nb \"w-2\" two\nc \"w-1\" three\nd \"w-10\" four\ne \"w-1\" five\n"
	if err := os.WriteFile(p.LogPath, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := p.Grep(`"w-1"`, 2), "c \"w-1\" three\ne \"w-1\" five"; got != want {
		t.Errorf("Grep = %q, want %q", got, want)
	}
	if got := p.Grep(`"w-3"`, 2); got != "" {
		t.Errorf("Grep of what no line holds = %q", got)
	}
}
