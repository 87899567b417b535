// Command release writes tidegate's release into dist/ (`make release`, after `make image`):
// crds.yaml (the CRDs alone), controller.yaml (the controller without the CRDs), admission.yaml
// (its ValidatingAdmissionPolicies) and install.yaml (all three and the fleet namespace `fleet`),
// built from config/ with kustomize, the controller's image set to the one dist/image.txt names by
// tag and digest; the tidegate CLI for each of release.CLIPlatforms (tidegate-<os>-<arch>); and
// SHA256SUMS over all of them.
package main

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/tidegate/tidegate/hack/lib/release"
)

func main() {
	out := flag.String("o", "dist", "The directory to write the manifests and binaries into.")
	config := flag.String("config", "config", "The config/ directory of a checkout.")
	ref := flag.String("image", "", "The controller's image as <repository>:<tag>@sha256:<digest>; defaults to what `make image` wrote to <o>/image.txt.")
	cli := flag.String("cli", strings.Join(release.CLIPlatforms, ","), "The GOOS/GOARCH pairs, comma-separated, to build the tidegate CLI for; empty for none.")
	flag.Parse()
	var platforms []string
	if *cli != "" {
		platforms = strings.Split(*cli, ",")
	}
	if err := run(*out, *config, *ref, platforms); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(out, config, ref string, platforms []string) error {
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
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	var names []string
	fmt.Printf("image  %s\n", ref)
	for _, f := range release.Files {
		p := filepath.Join(out, f.Name)
		if err := os.WriteFile(p, files[f.Name], 0o644); err != nil {
			return err
		}
		names = append(names, f.Name)
		fmt.Printf("%-28s %3d objects  from config/%s\n", p, strings.Count("\n"+string(files[f.Name]), "\n---\n")+1, f.Config)
	}
	for _, platform := range platforms {
		name, err := buildCLI(out, platform)
		if err != nil {
			return err
		}
		names = append(names, name)
		fmt.Printf("%-28s the tidegate CLI for %s\n", filepath.Join(out, name), platform)
	}
	return writeSums(out, names)
}

// buildCLI builds cmd/tidegate for platform (GOOS/GOARCH) into out and returns the file's name. It
// builds as `make image` builds the controller: without cgo (so a cross-compile needs no C
// toolchain, and the binary no libc), -trimpath and an empty build ID (the same commit gives the
// same bytes, so the same sum), -buildvcs (`tidegate version` names the commit).
func buildCLI(out, platform string) (string, error) {
	goos, goarch, ok := strings.Cut(platform, "/")
	if !ok || goos == "" || goarch == "" {
		return "", fmt.Errorf("platform %q is not GOOS/GOARCH", platform)
	}
	name := release.CLIName(platform)
	build := exec.Command("go", "build", "-trimpath", "-buildvcs=true", "-ldflags=-s -w -buildid=", "-o", filepath.Join(out, name), "./cmd/tidegate")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/tidegate for %s: %w", platform, err)
	}
	return name, nil
}

// writeSums writes release.Sums over the files names in out, as `sha256sum` prints them.
func writeSums(out string, names []string) error {
	var sums strings.Builder
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			return err
		}
		fmt.Fprintf(&sums, "%x  %s\n", sha256.Sum256(b), name)
	}
	return os.WriteFile(filepath.Join(out, release.Sums), []byte(sums.String()), 0o644)
}
