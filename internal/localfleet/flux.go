package localfleet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// sourceStorage is where source-controller keeps the artifacts it serves.
func (f *Fleet) sourceStorage() string { return filepath.Join(f.Dir, "source-storage") }

// startFlux starts source-controller and, unless opts.NoKustomizeController, kustomize-controller
// from bin as processes that reach the hub through fluxKubeConfig, and waits until they are ready.
func (f *Fleet) startFlux(ctx context.Context, bin string, opts Options) error {
	storage := f.sourceStorage()
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return err
	}
	env := []string{"KUBECONFIG=" + f.fluxKubeConfig, "RUNTIME_NAMESPACE=flux-system"}
	// ports[0] and ports[1] are every controller's metrics and health ports.
	common := func(ports []int) []string {
		return []string{
			"--metrics-addr=" + addr(ports[0]), "--health-addr=" + addr(ports[1]),
			"--enable-leader-election=false", "--log-level=debug", "--log-encoding=console", "--events-addr=",
		}
	}
	type controller struct {
		name  string
		ports int
		args  func(ports []int) []string
	}
	controllers := []controller{{"source-controller", 3, func(ports []int) []string {
		args := append(common(ports), "--storage-path="+storage, "--storage-addr="+addr(ports[2]), "--storage-adv-addr="+addr(ports[2]))
		return append(args, opts.SourceControllerArgs...)
	}}}
	if !opts.NoKustomizeController {
		controllers = append(controllers, controller{"kustomize-controller", 2, func(ports []int) []string {
			args := append(common(ports), "--concurrent=10", "--requeue-dependency=2s")
			return append(args, opts.KustomizeControllerArgs...)
		}})
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, c := range controllers {
		if err := f.startController(ctx, c.name, filepath.Join(bin, c.name), env, c.ports, c.args); err != nil {
			return err
		}
	}
	return nil
}

// startController starts a Flux controller on n newly reserved ports and waits until it is ready.
// When a port it was given was taken before it could listen, it starts it again on other ports.
func (f *Fleet) startController(ctx context.Context, name, bin string, env []string, n int, args func(ports []int) []string) error {
	logPath := filepath.Join(f.logDir(), name+".log")
	f.addLogFile(logPath)
	// A temporary directory of its own: kustomize-controller removes every kustomization-* directory
	// of its TMPDIR when it starts (the leftovers of an earlier process of its own), and with one
	// /tmp for every fleet on the machine, a fleet starting deleted the builds in flight of the
	// others' kustomize-controllers (BuildFailed: "evalsymlink failure on /tmp/kustomization-…").
	tmp := filepath.Join(f.Dir, name+"-tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return err
	}
	env = append(slices.Clip(env), "TMPDIR="+tmp)
	for attempt := 1; ; attempt++ {
		ports, err := reserve(n)
		if err != nil {
			return err
		}
		f.reserved = append(f.reserved, ports)
		proc, err := startProcess(name, logPath, env, bin, args(ports.ports)...)
		if err != nil {
			return err
		}
		proc.ports = ports.ports
		if err = proc.waitReady(ctx); err == nil {
			f.processes = append(f.processes, proc)
			return nil
		}
		proc.stop()
		if attempt == 3 || !addressInUse(logPath) {
			return err
		}
		_ = os.Rename(logPath, fmt.Sprintf("%s.%d", logPath, attempt))
	}
}

// RestartSourceController stops source-controller and starts it again with the same flags and
// ports, as a restarted pod would be. With loseStorage its storage directory is emptied in between,
// as a pod without a persistent volume comes back: every artifact it served is gone until it
// builds them again. The log of the first run is kept as source-controller.log.before-restart.
func (f *Fleet) RestartSourceController(ctx context.Context, loseStorage bool) error {
	i := slices.IndexFunc(f.processes, func(p *process) bool { return p.name == "source-controller" })
	if i < 0 {
		return errors.New("localfleet: this fleet runs no source-controller")
	}
	old := f.processes[i]
	old.stop()
	if loseStorage {
		if err := os.RemoveAll(f.sourceStorage()); err != nil {
			return fmt.Errorf("emptying source-controller's storage: %w", err)
		}
		if err := os.MkdirAll(f.sourceStorage(), 0o755); err != nil {
			return err
		}
	}
	_ = os.Rename(old.logPath, old.logPath+".before-restart")
	f.addLogFile(old.logPath + ".before-restart")
	proc, err := startProcess(old.name, old.logPath, old.env, old.bin, old.args...)
	if err != nil {
		return err
	}
	proc.ports = old.ports
	f.processes[i] = proc
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return proc.waitReady(ctx)
}

// PID returns the process id of the fleet's Flux controller named name ("source-controller",
// "kustomize-controller"), or 0 when it does not run.
func (f *Fleet) PID(name string) int {
	for _, p := range f.processes {
		if p.name == name {
			if ended, _ := p.exited(); !ended {
				return p.cmd.Process.Pid
			}
		}
	}
	return 0
}
