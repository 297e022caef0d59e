package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
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
	cf, files := readLayout(t, out, filepath.Join(dir, "layout"))
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/manager"}) || cf.OS != "linux" {
		t.Errorf("config: user %q, entrypoint %v, os %q; want 65532:65532, [/manager], linux",
			cf.Config.User, cf.Config.Entrypoint, cf.OS)
	}
	if n := strings.Count(files["etc/ssl/certs/ca-certificates.crt"], "BEGIN CERTIFICATE"); n < 100 {
		t.Errorf("%d CA certificates in /etc/ssl/certs/ca-certificates.crt", n)
	}
	if !strings.Contains(files["etc/passwd"], "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user:\n%s", files["etc/passwd"])
	}
	if mode, err := strconv.ParseUint(files["manager mode"], 8, 32); err != nil || mode&0o111 == 0 {
		t.Errorf("/manager missing or not executable (mode %q)", files["manager mode"])
	}
	checkNoShell(t, files)
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

// readLayout unpacks an OCI layout tarball holding one image and returns
// its config and its files: each regular file's body under its path, and
// each entry's octal mode under "<path> mode".
func readLayout(t *testing.T, tarball, dir string) (*v1.ConfigFile, map[string]string) {
	t.Helper()
	if err := exec.Command("tar", "-xf", tarball, "-C", mkdir(t, dir)).Run(); err != nil {
		t.Fatalf("unpacking the layout tarball: %v", err)
	}
	p, err := layout.FromPath(dir)
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
	files := map[string]string{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return cf, files
		} else if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		files[name+" mode"] = fmt.Sprintf("%o", h.Mode&0o777)
		if h.Typeflag == tar.TypeReg {
			body, _ := io.ReadAll(tr)
			files[name] = string(body)
		}
	}
}

// checkNoShell fails on a shell or a bin directory in the image's files.
func checkNoShell(t *testing.T, files map[string]string) {
	t.Helper()
	for name := range files {
		name = strings.TrimSuffix(name, " mode")
		if strings.HasPrefix(name, "bin") || name == "sh" || strings.HasSuffix(name, "/sh") {
			t.Errorf("the image holds %s: it needs no shell", name)
		}
	}
}
