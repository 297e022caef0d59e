package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// The CRD's variants: as installed, and with parts of its validation taken
// out, to tell what each part costs a status write. Only the first is a CRD
// to run SafeJob with.
const (
	variantAsIs       = "as-is"
	variantNoRules    = "no-cel-rules"
	variantNoTemplate = "no-template-schema"
	variantBare       = "neither"
)

var variantNames = []string{variantAsIs, variantNoRules, variantNoTemplate, variantBare}

// loadCRD reads the SafeJob CRD from dir.
func loadCRD(dir string) (*apiextensionsv1.CustomResourceDefinition, error) {
	path := filepath.Join(dir, "batch.safejob.dev_safejobs.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the CRD: %w", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(raw, crd); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	return crd, nil
}

// variant returns a copy of the CRD with the named part of its validation
// taken out: every CEL rule (x-kubernetes-validations), or the pod
// template's schema (kept as an object of any fields, and the rules that
// read it with it).
func variant(crd *apiextensionsv1.CustomResourceDefinition, name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	out := crd.DeepCopy()
	noRules, noTemplate := false, false
	switch name {
	case variantAsIs:
	case variantNoRules:
		noRules = true
	case variantNoTemplate:
		noTemplate = true
	case variantBare:
		noRules, noTemplate = true, true
	default:
		return nil, fmt.Errorf("unknown CRD variant %q (want one of %s)", name, strings.Join(variantNames, ", "))
	}
	for i := range out.Spec.Versions {
		root := out.Spec.Versions[i].Schema.OpenAPIV3Schema
		if noRules {
			dropRules(root)
		}
		if noTemplate {
			spec := root.Properties["spec"]
			spec.Properties["template"] = apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}
			spec.XValidations = nil // some read the template
			root.Properties["spec"] = spec
		}
	}
	return out, nil
}

// dropRules removes every CEL rule from a schema and the schemas within it.
func dropRules(s *apiextensionsv1.JSONSchemaProps) {
	if s == nil {
		return
	}
	s.XValidations = nil
	for k, p := range s.Properties {
		dropRules(&p)
		s.Properties[k] = p
	}
	if s.Items != nil {
		dropRules(s.Items.Schema)
	}
	if s.AdditionalProperties != nil {
		dropRules(s.AdditionalProperties.Schema)
	}
}
