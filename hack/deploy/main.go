// Command deploy installs tidegate on the cluster of the current kubeconfig context (`make deploy
// IMG=<image>`): it builds config/default (or the kustomization -config names) with the
// controller's image set to -image, and server-side applies every object, in the order
// `kubectl apply` would, as the field manager tidegate-deploy.
//
// It refuses to run without -image. config/manager names a placeholder no registry serves
// (ghcr.io/tidegate/tidegate-controller:latest), and a Deployment of it only ever reaches
// ImagePullBackOff: nothing tidegate can check from here says whether the cluster can pull an
// image, so the choice of one the cluster can pull is the user's, and the refusal says how to
// make one (`make image`) and how to get it to the cluster (load it into the nodes, or push it).
// It needs no kubectl, so that the tests run it as users do (test/firstrollout).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/hack/lib/release"
)

// fieldManager owns what deploy applies; a second run with another image takes the field over from
// an earlier `kubectl apply --server-side` (as --force-conflicts would).
const fieldManager = "tidegate-deploy"

func main() {
	img := flag.String("image", "", "The controller's image, as <registry>/<repository>:<tag> or @sha256:<digest>, one the cluster can pull (required).")
	config := flag.String("config", "config/default", "The kustomization to install: config/default, or an overlay such as config/workload-identity.")
	kubeconfig := flag.String("kubeconfig", "", "The kubeconfig file; defaults to $KUBECONFIG or ~/.kube/config.")
	kubeContext := flag.String("context", "", "The kubeconfig context; defaults to the current one.")
	flag.Parse()
	if err := run(*img, *config, *kubeconfig, *kubeContext, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "deploy:", err)
		os.Exit(1)
	}
}

// noImage is the refusal without an image: what is missing and each way to provide it.
func noImage(dist string) error {
	built := "`make image` builds one into dist/ (an OCI layout and a tarball; nothing is pushed)"
	if b, err := os.ReadFile(filepath.Join(dist, "image.txt")); err == nil {
		built = fmt.Sprintf("`make image` built %s into dist/ (nothing was pushed)", strings.TrimSpace(string(b)))
	}
	return fmt.Errorf(`no image: set IMG to an image of the controller the cluster can pull.
config/manager names a placeholder, ghcr.io/tidegate/tidegate-controller:latest, that no registry serves:
a Deployment of it never starts (ImagePullBackOff). %s; then either
  push it to a registry the cluster pulls from:
    crane push dist/tidegate-controller-image.tar registry.example.com/platform/tidegate-controller:<tag>
    make deploy IMG=registry.example.com/platform/tidegate-controller:<tag>
  or load it into the cluster's nodes (kind, for one), under the name dist/image.txt says:
    docker load -i dist/tidegate-controller-image.tar && kind load docker-image <that name>
    make deploy IMG=<that name>`, built)
}

func run(img, config, kubeconfig, kubeContext string, w io.Writer) error {
	if strings.TrimSpace(img) == "" {
		return noImage("dist")
	}
	dir, kustomization := filepath.Split(filepath.Clean(config))
	y, err := release.BuildConfig(dir, kustomization, img)
	if err != nil {
		return err
	}
	objs, err := decode(y)
	if err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: kubeContext}).ClientConfig()
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("reaching %s: %w", cfg.Host, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, o := range objs {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s %s: %w", o.GetKind(), objectName(o), err)
		}
		fmt.Fprintf(w, "%s/%s serverside-applied\n", strings.ToLower(o.GetKind()), o.GetName())
	}
	fmt.Fprintf(w, "installed %s with the image %s on %s; wait for it: kubectl -n tidegate-system rollout status deployment/tidegate-controller\n", config, img, cfg.Host)
	return nil
}

// objectName is an object's namespace/name, or its name when cluster-scoped.
func objectName(o *unstructured.Unstructured) string {
	if o.GetNamespace() != "" {
		return o.GetNamespace() + "/" + o.GetName()
	}
	return o.GetName()
}

// decode reads the objects of a multi-document YAML stream, in order.
func decode(y []byte) ([]*unstructured.Unstructured, error) {
	d := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(y), 4096)
	var objs []*unstructured.Unstructured
	for {
		var raw json.RawMessage
		if err := d.Decode(&raw); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, err
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(raw); err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
}
