// Command image writes the operator's container image as an OCI image
// layout tarball, from the Go toolchain alone (no container engine): the
// static manager binary on an empty base, with CA certificates, a nonroot
// user (uid and gid 65532, as distroless's nonroot) and no shell.
//
//	go run ./hack/image -binary bin/manager-linux-amd64 -out dist/safejob-image.tar
package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// NonrootUID is the user the operator runs as, as distroless's nonroot.
const NonrootUID = 65532

func main() {
	binary := flag.String("binary", "", "the statically linked manager binary for linux")
	out := flag.String("out", "dist/safejob-image.tar", "the OCI image layout tarball to write")
	ref := flag.String("ref", "safejob:latest", "the image's reference name in the layout")
	arch := flag.String("arch", "amd64", "the binary's architecture")
	flag.Parse()
	if err := write(*binary, *out, *ref, *arch); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func write(binary, out, ref, arch string) error {
	manager, err := os.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("reading the manager binary: %w", err)
	}
	img, err := Image(manager, arch)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "safejob-image-")
	if err != nil {
		return fmt.Errorf("making a work directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the image layout: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return fmt.Errorf("writing the image layout: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("making %s: %w", filepath.Dir(out), err)
	}
	return tarDir(dir, out)
}

// Image is the operator image of a manager binary: one layer holding
// /etc/passwd, /etc/group, the nonroot home and /manager; the config runs
// /manager as 65532:65532. Timestamps are fixed, so the same binary gives
// the same image.
func Image(manager []byte, arch string) (v1.Image, error) {
	files := []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, body: []byte("root:x:0:0:root:/root:/sbin/nologin\n" +
			fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonrootUID, NonrootUID))},
		{name: "etc/group", mode: 0o644, body: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonrootUID))},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, dir: true, owner: NonrootUID},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, body: caCertificates()},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "manager", mode: 0o755, body: manager},
	}
	layerTar, err := tarFiles(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("building the layer: %w", err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		return nil, fmt.Errorf("building the image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("reading the image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.User = fmt.Sprintf("%d:%d", NonrootUID, NonrootUID)
	cf.Config.Entrypoint = []string{"/manager"}
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=/"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "safejob",
		"org.opencontainers.image.description": "SafeJob operator: batch jobs with an exact completion ledger",
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the image config: %w", err)
	}
	return mutate.ConfigMediaType(img, types.OCIConfigJSON), nil
}

// caCertificates is the NSS root store, pinned by the module version of
// golang.org/x/crypto/x509roots/fallback, as PEM: for a manager that talks
// to anything beyond the API server (whose CA comes with its
// ServiceAccount). Roots NSS constrains beyond X.509 are left out.
func caCertificates() []byte {
	var b bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate})
	}
	return b.Bytes()
}

type file struct {
	name  string
	mode  int64
	dir   bool
	owner int
	body  []byte
}

func tarFiles(files []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.owner, Gid: f.owner, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("writing the layer: %w", err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("writing the layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("writing the layer: %w", err)
	}
	return buf.Bytes(), nil
}

// tarDir writes the files under dir into the tarball out, paths relative
// to dir.
func tarDir(dir, out string) (err error) {
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("creating %s: %w", out, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return fmt.Errorf("walking the layout: %w", err)
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return fmt.Errorf("walking the layout: %w", err)
		}
		h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(rel), time.Unix(0, 0), 0, 0, "", ""
		if info.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("writing %s: %w", out, err)
		}
		if info.IsDir() {
			return nil
		}
		body, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		if _, err := tw.Write(body); err != nil {
			return fmt.Errorf("writing %s: %w", out, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}
