package testutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CreateManifests creates every object of a multi-document YAML file.
func CreateManifests(ctx context.Context, c client.Client, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	objs, err := DecodeManifests(raw)
	if err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s %s from %s: %w", obj.GetKind(), obj.GetName(), path, err)
		}
	}
	return nil
}

// DecodeManifests reads the objects of a YAML or JSON stream of one or
// many documents; empty documents are skipped.
func DecodeManifests(raw []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("decoding manifests: %w", err)
		}
		if len(obj.Object) != 0 {
			out = append(out, obj)
		}
	}
}

// PolicyFiles are the admission policies that ship with the CRD, relative
// to the repository root.
var PolicyFiles = []string{
	filepath.Join("config", "policy", "immutable-spec.yaml"),
	filepath.Join("config", "policy", "queue-name.yaml"),
	filepath.Join("config", "policy", "run-now.yaml"),
	filepath.Join("config", "policy", "min-parallelism.yaml"),
	filepath.Join("config", "policy", "managed-job.yaml"),
}

// InstallPolicies creates the admission policies of the repository at root.
// The API server loads them asynchronously: a test that depends on one
// waits until it bites.
func InstallPolicies(ctx context.Context, c client.Client, root string) error {
	for _, f := range PolicyFiles {
		if err := CreateManifests(ctx, c, filepath.Join(root, f)); err != nil {
			return err
		}
	}
	return nil
}
