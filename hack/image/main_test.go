package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// TestImage builds the image of a real static binary as `make image` does,
// reads the layout tarball back, and checks what a cluster running it
// relies on: the entrypoint, a nonroot user, no shell, and an executable
// /manager.
func TestImage(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "manager")
	build := exec.Command("go", "build", "-o", bin, "./testdata/hello")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a static binary: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "image.tar")
	if err := write(bin, out, "safejob:test", "amd64"); err != nil {
		t.Fatal(err)
	}
	layoutDir := filepath.Join(dir, "layout")
	if err := exec.Command("tar", "-xf", out, "-C", mkdir(t, layoutDir)).Run(); err != nil {
		t.Fatalf("unpacking the layout tarball: %v", err)
	}
	p, err := layout.FromPath(layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) != 1 {
		t.Fatalf("index: %v manifests, %v", m, err)
	}
	if ref := m.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; ref != "safejob:test" {
		t.Errorf("reference name %q", ref)
	}
	img, err := p.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/manager"}) || cf.OS != "linux" {
		t.Errorf("config: user %q, entrypoint %v, os %q; want 65532:65532, [/manager], linux",
			cf.Config.User, cf.Config.Entrypoint, cf.OS)
	}
	files := map[string]*tar.Header{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = h
		if h.Name == "etc/passwd" {
			body, _ := io.ReadAll(tr)
			if !strings.Contains(string(body), "nonroot:x:65532:65532:") {
				t.Errorf("/etc/passwd has no nonroot user:\n%s", body)
			}
		}
	}
	if h := files["manager"]; h == nil || h.Mode&0o111 == 0 {
		t.Errorf("/manager missing or not executable: %+v", h)
	}
	for name := range files {
		if strings.HasPrefix(name, "bin") || strings.HasSuffix(name, "/sh") {
			t.Errorf("the image holds %s: it needs no shell", name)
		}
	}
	again := filepath.Join(dir, "again.tar")
	if err := write(bin, again, "safejob:test", "amd64"); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	if string(a) != string(b) {
		t.Error("two builds of the same binary give different tarballs")
	}
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
