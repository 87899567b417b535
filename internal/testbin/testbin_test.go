package testbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// build makes a fake build of c in dir: every file, and the stamps in stamps, dated done.
func build(t *testing.T, c cache, dir string, stamps []string, done time.Time) {
	t.Helper()
	for _, f := range c.files {
		path := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range stamps {
		path := filepath.Join(dir, ".done-"+s)
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, done, done); err != nil {
			t.Fatal(err)
		}
	}
}

// noEnv clears what would point the lookups elsewhere than the test's directories.
func noEnv(t *testing.T) {
	for _, env := range []string{DirEnv, FluxCLIEnv, KubeControllerManagerEnv, FluxControllersEnv, PrometheusEnv,
		testbinCache.env, fluxCLICache.env, kubeControllerManagerCache.env, fluxControllersCache.env, prometheusCache.env} {
		t.Setenv(env, "")
	}
}

func TestDirPrefersTheExplicitDirectoryThenTheEnvironment(t *testing.T) {
	noEnv(t)
	explicit, fromEnv := t.TempDir(), t.TempDir()
	build(t, testbinCache, explicit, nil, time.Now())
	build(t, testbinCache, fromEnv, nil, time.Now())
	t.Setenv(DirEnv, fromEnv)
	if got, err := Dir(explicit); err != nil || got != explicit {
		t.Errorf("Dir(%s) = %q, %v; want the explicit directory", explicit, got, err)
	}
	if got, err := Dir(""); err != nil || got != fromEnv {
		t.Errorf("Dir(\"\") = %q, %v; want $%s, %s", got, err, DirEnv, fromEnv)
	}
}

func TestDirWithoutTheBinariesSaysHowToBuildThem(t *testing.T) {
	noEnv(t)
	empty := t.TempDir()
	t.Setenv(DirEnv, empty)
	_, err := Dir("")
	for _, want := range []string{"kube-apiserver is missing in " + empty + " ($TIDEGATE_TESTBIN)", "make testbin", "hack/testbin.sh --print-dir"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Dir with an empty $%s: %v; want it to say %q", DirEnv, err, want)
		}
	}
}

// Without a directory named, Dir takes the build that finished last in the cache, skipping builds
// still running or failed (a stamp missing), as hack/testbin.sh leaves them.
func TestDirFindsTheNewestCompleteBuildInTheCache(t *testing.T) {
	noEnv(t)
	xdg := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", xdg)
	root := filepath.Join(xdg, "tidegate", "testbin")
	now := time.Now()
	build(t, testbinCache, filepath.Join(root, "aaaaaaaaaaaa"), testbinCache.stamps, now.Add(-2*time.Hour))
	build(t, testbinCache, filepath.Join(root, "bbbbbbbbbbbb"), testbinCache.stamps, now.Add(-time.Hour))
	build(t, testbinCache, filepath.Join(root, "cccccccccccc"), testbinCache.stamps[:2], now)
	if got, err := Dir(""); err != nil || got != filepath.Join(root, "bbbbbbbbbbbb") {
		t.Errorf("Dir(\"\") = %q, %v; want the newest complete build bbbbbbbbbbbb", got, err)
	}

	// TIDEGATE_TESTBIN_CACHE moves the cache, as it moves hack/testbin.sh's.
	moved := t.TempDir()
	t.Setenv(testbinCache.env, moved)
	_, err := Dir("")
	for _, want := range []string{"no test binaries", moved, "make testbin", "set TIDEGATE_TESTBIN"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Dir with an empty cache: %v; want it to say %q", err, want)
		}
	}
	build(t, testbinCache, filepath.Join(moved, "dddddddddddd"), testbinCache.stamps, now)
	if got, err := Dir(""); err != nil || got != filepath.Join(moved, "dddddddddddd") {
		t.Errorf("Dir(\"\") with %s = %q, %v", testbinCache.env, got, err)
	}
}

func TestFluxCLIFromTheEnvironmentOrTheCache(t *testing.T) {
	noEnv(t)
	home := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", home)
	if _, err := FluxCLI(); err == nil || !strings.Contains(err.Error(), "make testbin") || !strings.Contains(err.Error(), FluxCLIEnv) {
		t.Errorf("FluxCLI without a build: %v", err)
	}
	dir := filepath.Join(home, ".cache", "tidegate", "flux-cli", "eeeeeeeeeeee")
	build(t, fluxCLICache, dir, fluxCLICache.stamps, time.Now())
	if got, err := FluxCLI(); err != nil || got != filepath.Join(dir, "bin", "flux") {
		t.Errorf("FluxCLI() = %q, %v; want the cached build's bin/flux", got, err)
	}
	notExecutable := filepath.Join(t.TempDir(), "flux")
	if err := os.WriteFile(notExecutable, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(FluxCLIEnv, notExecutable)
	if _, err := FluxCLI(); err == nil || !strings.Contains(err.Error(), "not an executable file") {
		t.Errorf("FluxCLI with a file that is not executable: %v", err)
	}
}

// Prometheus is found where $TIDEGATE_PROMETHEUS says, else in hack/prometheus.sh's newest complete
// build (its cache moved by $TIDEGATE_PROMETHEUS_CACHE); without one, the error names the script and
// make testbin.
func TestPrometheusFromTheEnvironmentOrTheCache(t *testing.T) {
	noEnv(t)
	root := t.TempDir()
	t.Setenv(prometheusCache.env, root)
	_, err := Prometheus()
	for _, want := range []string{"no Prometheus", "hack/prometheus.sh", "make testbin", PrometheusEnv, root} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Prometheus without a build: %v; want it to say %q", err, want)
		}
	}
	build(t, prometheusCache, filepath.Join(root, "aaaaaaaaaaaa"), prometheusCache.stamps, time.Now().Add(-time.Hour))
	build(t, prometheusCache, filepath.Join(root, "bbbbbbbbbbbb"), prometheusCache.stamps, time.Now())
	build(t, prometheusCache, filepath.Join(root, "cccccccccccc"), nil, time.Now()) // still building
	if got, err := Prometheus(); err != nil || got != filepath.Join(root, "bbbbbbbbbbbb", "bin", "prometheus") {
		t.Errorf("Prometheus() = %q, %v; want the newest complete build's bin/prometheus", got, err)
	}
	named := filepath.Join(t.TempDir(), "prometheus")
	if err := os.WriteFile(named, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PrometheusEnv, named)
	if got, err := Prometheus(); err != nil || got != named {
		t.Errorf("Prometheus with $%s set = %q, %v; want %s", PrometheusEnv, got, err, named)
	}
}

// kube-controller-manager is found in a testbin directory that holds one, else where
// $TIDEGATE_KUBE_CONTROLLER_MANAGER says, else in hack/kube-controller-manager.sh's cache; without
// one, the error names the script and make testbin.
func TestKubeControllerManagerFromTestbinTheEnvironmentOrTheCache(t *testing.T) {
	noEnv(t)
	home := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", home)
	testbinDir := t.TempDir()
	_, err := KubeControllerManager(testbinDir)
	for _, want := range []string{"no kube-controller-manager", "hack/kube-controller-manager.sh", "make testbin", KubeControllerManagerEnv} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("KubeControllerManager without a build: %v; want it to say %q", err, want)
		}
	}
	cached := filepath.Join(home, ".cache", "tidegate", "kube-controller-manager", "eeeeeeeeeeee")
	build(t, kubeControllerManagerCache, cached, kubeControllerManagerCache.stamps, time.Now())
	if got, err := KubeControllerManager(testbinDir); err != nil || got != filepath.Join(cached, "bin", "kube-controller-manager") {
		t.Errorf("KubeControllerManager() = %q, %v; want the cached build's", got, err)
	}
	build(t, kubeControllerManagerCache, testbinDir, nil, time.Now())
	if got, err := KubeControllerManager(testbinDir); err != nil || got != filepath.Join(testbinDir, "bin", "kube-controller-manager") {
		t.Errorf("KubeControllerManager(%s) = %q, %v; want the one in the testbin directory", testbinDir, got, err)
	}
	named := filepath.Join(t.TempDir(), "kcm")
	if err := os.WriteFile(named, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(KubeControllerManagerEnv, named)
	if got, err := KubeControllerManager(testbinDir); err != nil || got != named {
		t.Errorf("KubeControllerManager with $%s set = %q, %v; want %s", KubeControllerManagerEnv, got, err, named)
	}
}

// notification-controller, helm-controller and their CRDs are found where $TIDEGATE_FLUX_CONTROLLERS
// says, else in hack/flux-controllers.sh's newest complete build (one with both); without one, the
// error names the script and make testbin.
func TestNotificationControllerFromTheEnvironmentOrTheCache(t *testing.T) {
	noEnv(t)
	home := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", home)
	_, _, err := NotificationController()
	for _, want := range []string{"no notification-controller", "hack/flux-controllers.sh", "make testbin", FluxControllersEnv} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NotificationController without a build: %v; want it to say %q", err, want)
		}
	}
	root := filepath.Join(home, ".cache", "tidegate", "flux-controllers")
	build(t, fluxControllersCache, filepath.Join(root, "aaaaaaaaaaaa"), fluxControllersCache.stamps, time.Now().Add(-time.Hour))
	build(t, fluxControllersCache, filepath.Join(root, "bbbbbbbbbbbb"), fluxControllersCache.stamps, time.Now())
	build(t, fluxControllersCache, filepath.Join(root, "cccccccccccc"), nil, time.Now()) // still building
	// Built by the script before it built helm-controller too.
	build(t, fluxControllersCache, filepath.Join(root, "dddddddddddd"), []string{"notification-controller"}, time.Now())
	newest := filepath.Join(root, "bbbbbbbbbbbb")
	if bin, crds, err := NotificationController(); err != nil || bin != filepath.Join(newest, "bin", "notification-controller") || crds != filepath.Join(newest, "notification-controller-crds") {
		t.Errorf("NotificationController() = %q, %q, %v; want the newest complete build's", bin, crds, err)
	}
	if bin, _, err := HelmController(); err != nil || bin != filepath.Join(newest, "bin", "helm-controller") {
		t.Errorf("HelmController() = %q, %v; want the newest complete build's", bin, err)
	}
	named := t.TempDir()
	t.Setenv(FluxControllersEnv, named)
	if _, _, err := NotificationController(); err == nil || !strings.Contains(err.Error(), "missing in "+named+" ($"+FluxControllersEnv+")") {
		t.Errorf("NotificationController with an empty $%s: %v", FluxControllersEnv, err)
	}
	build(t, fluxControllersCache, named, nil, time.Now())
	if bin, _, err := NotificationController(); err != nil || bin != filepath.Join(named, "bin", "notification-controller") {
		t.Errorf("NotificationController with $%s set = %q, %v; want the one there", FluxControllersEnv, bin, err)
	}
	if bin, crds, err := HelmController(); err != nil || bin != filepath.Join(named, "bin", "helm-controller") || crds != filepath.Join(named, "helm-controller-crds") {
		t.Errorf("HelmController with $%s set = %q, %q, %v; want the one there", FluxControllersEnv, bin, crds, err)
	}
}

// The lookups read what the scripts write: a change of the cache's place (hack/lib.sh, which every
// script opens its cache with), of a build step's stamp or of a binary's path in a script must
// change them too.
func TestTheLookupsMatchTheScripts(t *testing.T) {
	lib := readHack(t, "lib.sh")
	for _, want := range []string{
		`env="TIDEGATE_$(tr 'a-z-' 'A-Z_' <<<"$name")_CACHE"`,
		`DIR="${!env:-${XDG_CACHE_HOME:-$HOME/.cache}/tidegate/$name}/$key"`,
		`touch "$DIR/.done-$1"`,
	} {
		if !strings.Contains(lib, want) {
			t.Errorf("hack/lib.sh no longer has %s: update internal/testbin to find what the scripts build", want)
		}
	}
	for _, tc := range []struct {
		script string
		c      cache
		wants  []string
	}{
		{"testbin.sh", testbinCache, []string{
			`-o "$DIR/bin/etcd"`, `-o "$DIR/bin/kube-apiserver"`, `-o "$DIR/bin/source-controller"`, `-o "$DIR/bin/kustomize-controller"`,
			`"$DIR/crds/"`,
		}},
		{"flux-cli.sh", fluxCLICache, []string{`mv -f "$DIR/bin/flux.tmp" "$DIR/bin/flux"`}},
		{"kube-controller-manager.sh", kubeControllerManagerCache, []string{
			`mv -f "$DIR/bin/kube-controller-manager.tmp" "$DIR/bin/kube-controller-manager"`,
		}},
		{"prometheus.sh", prometheusCache, []string{`mv -f "$DIR/bin/prometheus.tmp" "$DIR/bin/prometheus"`}},
		{"flux-controllers.sh", fluxControllersCache, []string{
			`build_controller notification-controller `, `build_controller helm-controller `,
			`mv -f "$DIR/bin/$name.tmp" "$DIR/bin/$name"`, `cp "$src/config/crd/bases/"*.yaml "$DIR/$name-crds/"`,
		}},
	} {
		script := readHack(t, tc.script)
		// The cache's name gives both its directory and its variable (TIDEGATE_<NAME>_CACHE).
		wants := append(tc.wants, "open_cache "+tc.c.name+" ")
		if env := "TIDEGATE_" + strings.ToUpper(strings.ReplaceAll(tc.c.name, "-", "_")) + "_CACHE"; env != tc.c.env {
			t.Errorf("the %s cache's variable is %s, but hack/lib.sh derives %s from its name", tc.c.name, tc.c.env, env)
		}
		for _, s := range tc.c.stamps {
			wants = append(wants, "mark_built "+s)
		}
		for _, want := range wants {
			if !strings.Contains(script, want) {
				t.Errorf("hack/%s no longer has %s: update internal/testbin to find what it builds", tc.script, want)
			}
		}
	}
}

func readHack(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "hack", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
