// Package config holds tidegate's Kubernetes manifests: the CRDs and RBAC that `make manifests`
// generates, the manager Deployment, config/crd and config/controller that install the CRDs and the
// controller apart (uninstalling the controller never deletes a CRD), and config/default that
// installs both. The Go code here embeds
// the CRDs, so that a tidegate binary built anywhere (go install, -trimpath) installs them on the
// sandbox's hub without a checkout of this repository.
package config

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// crdFiles are the files controller-gen writes into crd/bases (`make manifests`).
//
//go:embed crd/bases/*.yaml
var crdFiles embed.FS

// CRDs returns tidegate's CustomResourceDefinitions, as generated into config/crd/bases.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	paths, err := fs.Glob(crdFiles, "crd/bases/*.yaml")
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, path := range paths {
		f, err := crdFiles.Open(path)
		if err != nil {
			return nil, err
		}
		more, err := decodeCRDs(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("decoding config/%s: %w (run `make manifests` to regenerate it)", path, err)
		}
		crds = append(crds, more...)
	}
	if len(crds) == 0 {
		return nil, errors.New("no CRDs embedded from config/crd/bases: run `make manifests`")
	}
	return crds, nil
}

func decodeCRDs(r io.Reader) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	d := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var crds []*apiextensionsv1.CustomResourceDefinition
	for {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		err := d.Decode(crd)
		if errors.Is(err, io.EOF) {
			return crds, nil
		}
		if err != nil {
			return nil, err
		}
		if crd.Kind == "" {
			continue // an empty document
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%s %s is not a CustomResourceDefinition", crd.Kind, crd.Name)
		}
		crds = append(crds, crd)
	}
}
