// Command release builds the kubectl plugin's release archives (one
// tar.gz per platform, holding kubectl-safejob and the LICENSE) and the
// krew manifest that installs them (dist/krew/safejob.yaml), ready to be
// attached to a release and proposed to the krew index.
//
//	go run ./hack/release -version v0.1.0 [-platforms linux/amd64,...] [-out dist/krew]
//
// The archives are reproducible: fixed file times, owners and modes, and a
// binary built with -trimpath, so the manifest's sha256 sums depend only on
// the source, the version and the Go toolchain.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// defaultPlatforms are the platforms a release carries.
const defaultPlatforms = "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64"

// semver is what krew accepts as a plugin version.
var semver = regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

func main() {
	version := flag.String("version", "v0.0.0-dev", "The release version (semver with a leading v)")
	platforms := flag.String("platforms", defaultPlatforms, "The os/arch pairs to build, comma-separated")
	out := flag.String("out", filepath.Join("dist", "krew"), "Where to write the archives and safejob.yaml")
	baseURL := flag.String("base-url", "https://github.com/safejob/safejob/releases/download",
		"The release download URL; <base-url>/<version>/<archive> is each archive's URI")
	flag.Parse()
	if err := run(*version, strings.Split(*platforms, ","), *out, *baseURL); err != nil {
		log.Fatal(err)
	}
}

func run(version string, platforms []string, out, baseURL string) error {
	if !semver.MatchString(version) {
		return fmt.Errorf("version %q: krew takes a semantic version with a leading v (v0.1.0)", version)
	}
	license, err := os.ReadFile("LICENSE")
	if err != nil {
		return fmt.Errorf("reading the LICENSE (run from the repository root): %w", err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", out, err)
	}
	m := manifest(version)
	for _, p := range platforms {
		goos, goarch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok {
			return fmt.Errorf("platform %q: want os/arch", p)
		}
		name := fmt.Sprintf("kubectl-safejob_%s_%s.tar.gz", goos, goarch)
		sum, err := buildArchive(filepath.Join(out, name), goos, goarch, version, license)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", goos, goarch, err)
		}
		bin := binName(goos)
		m.Spec.Platforms = append(m.Spec.Platforms, platform{
			Selector: selector{MatchLabels: map[string]string{"os": goos, "arch": goarch}},
			URI:      fmt.Sprintf("%s/%s/%s", strings.TrimSuffix(baseURL, "/"), version, name),
			Sha256:   sum,
			Bin:      bin,
			Files:    []file{{From: bin, To: "."}, {From: "LICENSE", To: "."}},
		})
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return fmt.Errorf("writing the manifest: %w", err)
	}
	path := filepath.Join(out, "safejob.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil { //nolint:gosec // a manifest to publish
		return fmt.Errorf("writing %s: %w", path, err)
	}
	fmt.Println(path)
	return nil
}

func binName(goos string) string {
	if goos == "windows" {
		return "kubectl-safejob.exe"
	}
	return "kubectl-safejob"
}

// buildArchive builds the plugin for one platform into a reproducible
// tar.gz at path and returns its sha256.
func buildArchive(path, goos, goarch, version string, license []byte) (string, error) {
	tmp, err := os.MkdirTemp("", "safejob-release-")
	if err != nil {
		return "", fmt.Errorf("creating a build directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	bin := filepath.Join(tmp, binName(goos))
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", bin, "./cmd/kubectl-safejob")
	build.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building the plugin: %w", err)
	}
	exe, err := os.ReadFile(bin) //nolint:gosec // built just now
	if err != nil {
		return "", fmt.Errorf("reading the plugin: %w", err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	// A fixed time: the archive depends on its contents only.
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{binName(goos), 0o755, exe}, {"LICENSE", 0o644, license}} {
		hdr := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: epoch, Typeflag: tar.TypeReg,
			Uname: "root", Gname: "root", Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return "", fmt.Errorf("archiving %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return "", fmt.Errorf("archiving %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("closing the archive: %w", err)
	}
	if err := gz.Close(); err != nil {
		return "", fmt.Errorf("compressing the archive: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil { //nolint:gosec // a release archive
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// The krew manifest (krew.googlecontainertools.github.com/v1alpha2 Plugin),
// the fields krew reads.
type krewPlugin struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   metadata `json:"metadata"`
	Spec       spec     `json:"spec"`
}

type metadata struct {
	Name string `json:"name"`
}

type spec struct {
	Version          string     `json:"version"`
	Homepage         string     `json:"homepage"`
	ShortDescription string     `json:"shortDescription"`
	Description      string     `json:"description"`
	Platforms        []platform `json:"platforms"`
}

type platform struct {
	Selector selector `json:"selector"`
	URI      string   `json:"uri"`
	Sha256   string   `json:"sha256"`
	Bin      string   `json:"bin"`
	Files    []file   `json:"files"`
}

type selector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type file struct {
	From string `json:"from"`
	To   string `json:"to"`
}

func manifest(version string) *krewPlugin {
	return &krewPlugin{
		APIVersion: "krew.googlecontainertools.github.com/v1alpha2",
		Kind:       "Plugin",
		Metadata:   metadata{Name: "safejob"},
		Spec: spec{
			Version:          version,
			Homepage:         "https://github.com/safejob/safejob",
			ShortDescription: "Read SafeJob ledgers, see why one waits, run schedules",
			Description: "Works with SafeJobs (batch.safejob.dev), batch Jobs whose completions are\n" +
				"recorded exactly once in a ledger: show a SafeJob's ledger, say why one is\n" +
				"not progressing, list and start the runs of a schedule, watch live counts,\n" +
				"and convert batch/v1 Job and CronJob manifests into SafeJobs.\n",
		},
	}
}
