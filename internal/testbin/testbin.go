// Package testbin finds the binaries that `make testbin` builds and caches, and starts API servers
// with them: hack/testbin.sh builds kube-apiserver, etcd, Flux's source-controller and
// kustomize-controller (and copies their CRDs) and controller-gen; hack/kube-controller-manager.sh
// builds kube-controller-manager; hack/flux-cli.sh builds the Flux CLI; hack/flux-controllers.sh
// builds notification-controller and helm-controller (and copies their CRDs); hack/prometheus.sh builds the Prometheus
// server. It ships in the tidegate binary, for `tidegate sandbox`, so it finds them without a checkout:
// in a directory named explicitly, else in the one an environment variable names, else in the
// scripts' cache (see Dir).
package testbin

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// The environment variables that name what `make testbin` built. The Makefile sets DirEnv.
const (
	// DirEnv names the testbin directory: the one `hack/testbin.sh --print-dir` prints.
	DirEnv = "TIDEGATE_TESTBIN"
	// FluxCLIEnv names the Flux CLI binary.
	FluxCLIEnv = "TIDEGATE_FLUX_CLI"
	// KubeControllerManagerEnv names the kube-controller-manager binary.
	KubeControllerManagerEnv = "TIDEGATE_KUBE_CONTROLLER_MANAGER"
	// FluxControllersEnv names the directory of hack/flux-controllers.sh's build (what
	// `hack/flux-controllers.sh --print-dir` prints): bin/notification-controller,
	// bin/helm-controller and, in notification-controller-crds and helm-controller-crds, their CRDs.
	FluxControllersEnv = "TIDEGATE_FLUX_CONTROLLERS"
	// PrometheusEnv names the Prometheus server binary.
	PrometheusEnv = "TIDEGATE_PROMETHEUS"
)

// The scripts' caches, as they compute them: each build goes into a directory of its own under the
// cache, named by a hash of the script (and of hack/versions.env) that a binary cannot compute, and
// each step of a build leaves a stamp .done-STEP when it finished. A directory holding every stamp
// and every file of the build is complete.
var (
	testbinCache = cache{
		what: "test binaries", setBy: DirEnv, setTo: "the directory it built",
		env: "TIDEGATE_TESTBIN_CACHE", name: "testbin",
		stamps: []string{"controller-gen", "etcd", "flux", "kube-apiserver"},
		files:  append(binaries(), "crds"),
	}
	fluxCLICache = cache{
		what: "Flux CLI (hack/flux-cli.sh, a few minutes)", setBy: FluxCLIEnv, setTo: "a flux binary",
		env: "TIDEGATE_FLUX_CLI_CACHE", name: "flux-cli",
		stamps: []string{"flux"},
		files:  []string{fluxCLIPath},
	}
	kubeControllerManagerCache = cache{
		what:  "kube-controller-manager (hack/kube-controller-manager.sh, about 10 minutes)",
		setBy: KubeControllerManagerEnv, setTo: "a kube-controller-manager binary",
		env: "TIDEGATE_KUBE_CONTROLLER_MANAGER_CACHE", name: "kube-controller-manager",
		stamps: []string{"kube-controller-manager"},
		files:  []string{kubeControllerManagerPath},
	}
	fluxControllersCache = cache{
		what:  "notification-controller and helm-controller (hack/flux-controllers.sh, about 25 minutes)",
		setBy: FluxControllersEnv, setTo: "the directory it built",
		env: "TIDEGATE_FLUX_CONTROLLERS_CACHE", name: "flux-controllers",
		stamps: []string{"notification-controller", "helm-controller"},
		files: []string{notificationControllerPath, helmControllerPath,
			notificationControllerCRDs, helmControllerCRDs},
	}
	prometheusCache = cache{
		what: "Prometheus (hack/prometheus.sh, about 5 minutes)", setBy: PrometheusEnv, setTo: "a prometheus binary",
		env: "TIDEGATE_PROMETHEUS_CACHE", name: "prometheus",
		stamps: []string{"prometheus"},
		files:  []string{prometheusPath},
	}
)

// fluxCLIPath is the Flux CLI in a build of hack/flux-cli.sh, kubeControllerManagerPath
// kube-controller-manager in a build of hack/kube-controller-manager.sh (and in a testbin
// directory that holds one).
var (
	fluxCLIPath                = filepath.Join("bin", "flux")
	kubeControllerManagerPath  = filepath.Join("bin", "kube-controller-manager")
	notificationControllerPath = filepath.Join("bin", "notification-controller")
	helmControllerPath         = filepath.Join("bin", "helm-controller")
	// hack/flux-controllers.sh copies each controller's CRDs into a directory of its own.
	notificationControllerCRDs = "notification-controller-crds"
	helmControllerCRDs         = "helm-controller-crds"
	prometheusPath             = filepath.Join("bin", "prometheus")
)

// binaries are what the local fleet runs, in a testbin directory.
func binaries() []string {
	var paths []string
	for _, b := range []string{"kube-apiserver", "etcd", "source-controller", "kustomize-controller"} {
		paths = append(paths, filepath.Join("bin", b))
	}
	return paths
}

const buildHint = "run `make testbin` in a tidegate checkout (about 30 minutes the first time)"

// Dir returns the testbin directory: dir when it is not empty (`tidegate sandbox up --testbin`),
// else $TIDEGATE_TESTBIN, else the complete build that finished last in hack/testbin.sh's cache,
// ${TIDEGATE_TESTBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidegate/testbin}. The cache is
// searched rather than a link followed because its directories are named by a hash of the scripts,
// which a built binary cannot compute, and a link the script kept would change the script, hence
// the hash, and rebuild every cache; every complete build there is one `make testbin` made. It
// fails, naming the fix, when the directory does not hold the binaries.
func Dir(dir string) (string, error) {
	from := ""
	if dir == "" {
		dir, from = os.Getenv(DirEnv), " ($"+DirEnv+")"
	}
	if dir == "" {
		found, err := testbinCache.find()
		if err != nil {
			return "", err
		}
		return filepath.Abs(found)
	}
	for _, b := range binaries() {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("test binary %s is missing in %s%s: %s, and name the directory `hack/testbin.sh --print-dir` prints: %w",
				filepath.Base(b), dir, from, buildHint, err)
		}
	}
	return filepath.Abs(dir)
}

// FluxCLI returns the path of the Flux CLI (`flux`) that `make testbin` builds: $TIDEGATE_FLUX_CLI
// when set, else bin/flux of the build that finished last in hack/flux-cli.sh's cache,
// ${TIDEGATE_FLUX_CLI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidegate/flux-cli}. It fails, naming
// the fix, when the binary has not been built.
func FluxCLI() (string, error) {
	return fluxCLICache.binary("the Flux CLI", fluxCLIPath, "hack/flux-cli.sh, a few minutes")
}

// Prometheus returns the path of the Prometheus server (`prometheus`) that `make testbin` builds,
// which the local fleet runs to scrape the simulated workloads' service metrics: $TIDEGATE_PROMETHEUS
// when set, else bin/prometheus of the build that finished last in hack/prometheus.sh's cache,
// ${TIDEGATE_PROMETHEUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidegate/prometheus}. It fails, naming
// the fix, when the binary has not been built.
func Prometheus() (string, error) {
	return prometheusCache.binary("Prometheus", prometheusPath, "hack/prometheus.sh, about 5 minutes")
}

// KubeControllerManager returns the path of the kube-controller-manager that `make testbin` builds,
// whose garbage-collector and namespace controllers the local fleet's hub runs:
// bin/kube-controller-manager in testbinDir when that holds one, else
// $TIDEGATE_KUBE_CONTROLLER_MANAGER when set, else bin/kube-controller-manager of the build that
// finished last in hack/kube-controller-manager.sh's cache,
// ${TIDEGATE_KUBE_CONTROLLER_MANAGER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidegate/kube-controller-manager}.
// It fails, naming the fix, when the binary has not been built.
func KubeControllerManager(testbinDir string) (string, error) {
	if testbinDir != "" && os.Getenv(KubeControllerManagerEnv) == "" {
		if path := filepath.Join(testbinDir, kubeControllerManagerPath); isExecutable(path) {
			return path, nil
		}
	}
	return kubeControllerManagerCache.binary("kube-controller-manager", kubeControllerManagerPath, "hack/kube-controller-manager.sh, about 10 minutes")
}

// NotificationController returns the notification-controller binary that `make testbin` builds and
// the directory of its CRDs (Alert, Provider, Receiver), copied from the same module version: in
// $TIDEGATE_FLUX_CONTROLLERS when set, else in the build that finished last in
// hack/flux-controllers.sh's cache,
// ${TIDEGATE_FLUX_CONTROLLERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tidegate/flux-controllers}.
// It fails, naming the fix, when they have not been built.
func NotificationController() (bin, crds string, err error) {
	return fluxController(notificationControllerPath, notificationControllerCRDs)
}

// HelmController returns the helm-controller binary that `make testbin` builds and the directory
// of its CRD (HelmRelease), copied from the same module version, found as NotificationController finds notification-controller (the same script
// builds both).
func HelmController() (bin, crds string, err error) {
	return fluxController(helmControllerPath, helmControllerCRDs)
}

// fluxController returns the binary at path in hack/flux-controllers.sh's build and the directory
// of its CRDs there, crdDir.
func fluxController(path, crdDir string) (bin, crds string, err error) {
	dir, from := os.Getenv(FluxControllersEnv), " ($"+FluxControllersEnv+")"
	if dir == "" {
		if dir, err = fluxControllersCache.find(); err != nil {
			return "", "", err
		}
		from = ""
	}
	for _, f := range fluxControllersCache.files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", "", fmt.Errorf("%s is missing in %s%s: %s (hack/flux-controllers.sh, about 25 minutes): %w",
				f, dir, from, buildHint, err)
		}
	}
	bin = filepath.Join(dir, path)
	if !isExecutable(bin) {
		return "", "", fmt.Errorf("%s at %s is not an executable file: %s (hack/flux-controllers.sh)", filepath.Base(path), bin, buildHint)
	}
	return bin, filepath.Join(dir, crdDir), nil
}

// binary returns the binary named what at path in the cache's newest build, or the one the cache's
// setBy variable names, failing with the fix (how) when it is not an executable file.
func (c cache) binary(what, path, how string) (string, error) {
	bin := os.Getenv(c.setBy)
	if bin == "" {
		dir, err := c.find()
		if err != nil {
			return "", err
		}
		bin = filepath.Join(dir, path)
	}
	info, err := os.Stat(bin)
	if err != nil {
		return "", fmt.Errorf("%s is missing at %s ($%s): %s (%s): %w", what, bin, c.setBy, buildHint, how, err)
	}
	if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s at %s ($%s) is not an executable file: %s (%s)", what, bin, c.setBy, buildHint, how)
	}
	return bin, nil
}

func isExecutable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && !info.IsDir() && info.Mode().Perm()&0o111 != 0
}

// cache is where one of the scripts caches its builds.
type cache struct {
	// what the build is, setBy the variable that names it instead and setTo what it names: for
	// the error when there is no build.
	what, setBy, setTo string
	// env overrides the cache's directory.
	env string
	// name is the cache's directory under $XDG_CACHE_HOME/tidegate.
	name string
	// stamps are the steps of a build, each done when .done-STEP exists.
	stamps []string
	// files are what a complete build holds, relative to its directory.
	files []string
}

// dir is the cache's directory as the script computes it.
func (c cache) dir() (string, error) {
	if d := os.Getenv(c.env); d != "" {
		return d, nil
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding the cache of `make testbin`: %w: set %s or XDG_CACHE_HOME", err, c.env)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "tidegate", c.name), nil
}

// find returns the complete build in the cache that finished last, or an error that says where it
// looked and how to make one.
func (c cache) find() (string, error) {
	root, err := c.dir()
	if err != nil {
		return "", err
	}
	dir, ok := c.newest(root)
	if !ok {
		return "", fmt.Errorf("no %s: $%s is not set and %s holds no complete build: %s, or set %s to %s",
			c.what, c.setBy, root, buildHint, c.setBy, c.setTo)
	}
	return dir, nil
}

// newest returns the complete build under root whose last step finished last.
func (c cache) newest(root string) (string, bool) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return "", false
	}
	var best string
	var bestDone time.Time
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if done, ok := c.completed(dir); ok && (best == "" || done.After(bestDone)) {
			best, bestDone = dir, done
		}
	}
	return best, best != ""
}

// completed returns when the build in dir finished, and whether it is complete.
func (c cache) completed(dir string) (time.Time, bool) {
	var done time.Time
	for _, s := range c.stamps {
		info, err := os.Stat(filepath.Join(dir, ".done-"+s))
		if err != nil {
			return time.Time{}, false
		}
		if info.ModTime().After(done) {
			done = info.ModTime()
		}
	}
	for _, f := range c.files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return time.Time{}, false
		}
	}
	return done, true
}
