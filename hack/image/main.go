// Command image builds tidegate-controller's container image (`make image`): a static binary for
// Linux, built from this checkout with -trimpath, in one layer over an empty base (hack/lib/image).
// It writes into the output directory
//
//	tidegate-controller-linux-<arch>   the binary
//	tidegate-controller-image/         the image as an OCI image layout
//	tidegate-controller-image.tar      the image as a tarball for `docker load` / `podman load`
//	image.txt                          the image's reference by tag and digest
//
// and prints the reference. Nothing is pulled or pushed: pushing is a registry's business
// (`crane push dist/tidegate-controller-image.tar ghcr.io/tidegate/tidegate-controller:<tag>`).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/tidegate/tidegate/hack/lib/image"
)

func main() {
	out := flag.String("o", "dist", "The directory to write the binary and the image into.")
	version := flag.String("version", "", "The image's tag and version label; defaults to the binary's module version (a pseudo-version of the commit when it has no tag).")
	arch := flag.String("arch", runtime.GOARCH, "The GOARCH to build for.")
	binary := flag.String("binary", "", "Image this tidegate-controller binary (built for linux without cgo, in a Git checkout) instead of building one.")
	flag.Parse()
	if err := run(*out, *version, *arch, *binary); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(out, version, arch, bin string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if bin == "" {
		bin = filepath.Join(out, "tidegate-controller-linux-"+arch)
		// -trimpath and an empty build ID so that the same commit builds the same binary, and so the
		// same image digest; -buildvcs stamps the commit the image's labels name.
		build := exec.Command("go", "build", "-trimpath", "-buildvcs=true", "-ldflags=-s -w -buildid=", "-o", bin, "./cmd/tidegate-controller")
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("go build ./cmd/tidegate-controller: %w", err)
		}
	}
	b, err := image.Build(bin, version)
	if err != nil {
		return err
	}
	if err := b.WriteLayout(filepath.Join(out, "tidegate-controller-image")); err != nil {
		return fmt.Errorf("writing the OCI image layout: %w", err)
	}
	if err := b.WriteTarball(filepath.Join(out, "tidegate-controller-image.tar")); err != nil {
		return fmt.Errorf("writing the image tarball: %w", err)
	}
	if err := os.WriteFile(filepath.Join(out, "image.txt"), []byte(b.Ref()+"\n"), 0o644); err != nil {
		return err
	}
	size, err := image.LayerBytes(b.Image)
	if err != nil {
		return err
	}
	fmt.Printf("image     %s\nrevision  %s\nsize      %.1f MiB compressed; layout %s, tarball %s\n", b.Ref(), b.Revision, float64(size)/(1<<20),
		filepath.Join(out, "tidegate-controller-image"), filepath.Join(out, "tidegate-controller-image.tar"))
	if b.Modified {
		fmt.Println("note      built from a tree with uncommitted changes: the revision label names the commit they are on")
	}
	return nil
}
