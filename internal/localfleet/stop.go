package localfleet

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Stop stops every process and API server and removes the fleet's directory. Safe to call twice.
func (f *Fleet) Stop() {
	f.stopOnce.Do(func() {
		if f.reaper != nil {
			_ = f.reaper.Process.Kill()
			_, _ = f.reaper.Process.Wait()
		}
		f.closePrometheus()
		for i := len(f.processes) - 1; i >= 0; i-- {
			f.processes[i].stop()
		}
		for _, s := range f.reserved {
			s.release()
		}
		f.closeFronts()
		var wg sync.WaitGroup
		stopEnv := func(e *envtest.Environment) {
			if e == nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); _ = e.Stop() }()
		}
		stopEnv(f.hub)
		for _, m := range f.Members {
			stopEnv(m.env)
		}
		wg.Wait()
		// envtest retries a control plane that did not come up in time, and the API server of a
		// failed try (slow to answer on a loaded machine) is not stopped with the last: end whatever
		// still names the fleet's directory, as the reaper would.
		killLeftovers(f.Dir)
		f.Registry.Stop()
		if f.git != nil {
			f.git.StopHTTP()
			os.RemoveAll(f.git.Root())
		}
		if os.Getenv("TIDEGATE_KEEP_FLEET") == "" {
			os.RemoveAll(f.Dir)
		}
	})
}

// startReaper starts a watchdog, outside this process's group, that kills every process of the fleet
// and removes its directory once this process is gone. Stop ends it first; it matters only when the
// test binary dies without cleaning up (a `go test -timeout` panic, a kill): envtest's API servers and
// etcd would otherwise outlive it.
func (f *Fleet) startReaper() error {
	const script = `while kill -0 "$0" 2>/dev/null; do sleep 1; done
for p in /proc/[0-9]*; do [ "${p#/proc/}" = "$$" ] && continue; grep -qsaF -- "$1" "$p/cmdline" && kill -9 "${p#/proc/}" 2>/dev/null; done
rm -rf -- "$1"`
	cmd := exec.Command("/bin/sh", "-c", script, strconv.Itoa(os.Getpid()), f.Dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the fleet reaper: %w", err)
	}
	f.reaper = cmd
	return nil
}
