// Command release writes tidegate's release manifests into dist/ (`make release`, after
// `make image`): crds.yaml (the CRDs alone), controller.yaml (the controller without the CRDs),
// admission.yaml (its ValidatingAdmissionPolicies) and install.yaml (all three and the fleet namespace `fleet`), built from config/ with kustomize, the controller's image set to the one
// dist/image.txt names by tag and digest; and SHA256SUMS over them.
package main

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tidegate/tidegate/hack/lib/release"
)

func main() {
	out := flag.String("o", "dist", "The directory to write the manifests into.")
	config := flag.String("config", "config", "The config/ directory of a checkout.")
	ref := flag.String("image", "", "The controller's image as <repository>:<tag>@sha256:<digest>; defaults to what `make image` wrote to <o>/image.txt.")
	flag.Parse()
	if err := run(*out, *config, *ref); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(out, config, ref string) error {
	if ref == "" {
		b, err := os.ReadFile(filepath.Join(out, "image.txt"))
		if err != nil {
			return fmt.Errorf("no image given and none built: %w (run `make image`, or pass -image)", err)
		}
		ref = strings.TrimSpace(string(b))
	}
	files, err := release.Build(config, ref)
	if err != nil {
		return err
	}
	var sums strings.Builder
	fmt.Printf("image  %s\n", ref)
	for _, f := range release.Files {
		p := filepath.Join(out, f.Name)
		if err := os.WriteFile(p, files[f.Name], 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(files[f.Name])
		fmt.Fprintf(&sums, "%x  %s\n", sum, f.Name)
		fmt.Printf("%-22s %3d objects  from config/%s\n", p, strings.Count("\n"+string(files[f.Name]), "\n---\n")+1, f.Config)
	}
	return os.WriteFile(filepath.Join(out, "SHA256SUMS"), []byte(sums.String()), 0o644)
}
