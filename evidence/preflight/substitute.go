package preflight

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/fluxcd/pkg/envsubst"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const (
	// SubstituteKey is the label or annotation that, set to SubstituteDisabled, leaves an object
	// out of the substitution.
	SubstituteKey = "kustomize.toolkit.fluxcd.io/substitute"
	// SubstituteDisabled is the value of SubstituteKey that disables the substitution.
	SubstituteDisabled = "disabled"
)

// varName is the rule kustomize-controller holds variable names to (fluxcd/pkg/kustomize varsubRegex).
var varName = regexp.MustCompile(`^[_[:alpha:]][_[:alpha:][:digit:]]*$`)

// Substitute applies Flux postBuild variable substitution (vars, spec.postBuild.substitute) to
// rendered objects the way kustomize-controller does (fluxcd/pkg/kustomize SubstituteVariables with
// its defaults: non-strict, substitute strategy WithVariables), returning new objects in the same
// order; objs are not modified.
//
// Each object is written as YAML, its ${var}, ${var:=default} and the other envsubst expressions
// are evaluated (a variable without a value and without a default becomes ""), and the result is
// read back as YAML, so "replicas: ${replicas}" with replicas=3 becomes the number 3. Newlines in
// values are dropped, as kustomize-controller drops them. Objects labelled or annotated
// kustomize.toolkit.fluxcd.io/substitute: disabled are left alone. With no vars (nil or empty)
// nothing is substituted, as kustomize-controller substitutes nothing without variables, and the
// objects are returned unchanged (as copies).
//
// It fails on a variable name that is not a shell identifier, and on an object whose expressions do
// not parse or that is no longer an object after the substitution, naming the object.
func Substitute(objs []*unstructured.Unstructured, vars map[string]string) ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, 0, len(objs))
	if len(vars) == 0 {
		for _, o := range objs {
			out = append(out, o.DeepCopy())
		}
		return out, nil
	}
	values := make(map[string]string, len(vars))
	for k, v := range vars {
		if !varName.MatchString(k) {
			return nil, fmt.Errorf("'%s' var name is invalid, must match '%s'", k, varName)
		}
		values[k] = strings.ReplaceAll(v, "\n", "")
	}
	mapping := func(name string) (string, bool) { return values[name], true }
	for _, o := range objs {
		if o == nil {
			return nil, fmt.Errorf("nil object")
		}
		if o.GetLabels()[SubstituteKey] == SubstituteDisabled || o.GetAnnotations()[SubstituteKey] == SubstituteDisabled {
			out = append(out, o.DeepCopy())
			continue
		}
		s, err := substitute(o, mapping)
		if err != nil {
			return nil, fmt.Errorf("post build failed for '%s/%s': %w", o.GroupVersionKind(), o.GetName(), err)
		}
		out = append(out, s)
	}
	return out, nil
}

func substitute(o *unstructured.Unstructured, mapping func(string) (string, bool)) (*unstructured.Unstructured, error) {
	data, err := yaml.Marshal(o.Object)
	if err != nil {
		return nil, fmt.Errorf("YAML: %w", err)
	}
	output, err := envsubst.Eval(string(data), mapping)
	if err != nil {
		return nil, fmt.Errorf("envsubst error: variable substitution failed: %w", err)
	}
	jsonData, err := yaml.YAMLToJSON([]byte(output))
	if err != nil {
		return nil, fmt.Errorf("YAMLToJSON: %w", err)
	}
	s := &unstructured.Unstructured{}
	if err := s.UnmarshalJSON(jsonData); err != nil {
		return nil, fmt.Errorf("UnmarshalJSON: %w", err)
	}
	return s, nil
}
