package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// status says whether the sandbox in dir runs and its hub answers, and shows its clusters and
// rollouts. It fails (exit 1) when no sandbox runs or the hub does not answer.
func status(ctx context.Context, out io.Writer, dir string) error {
	silenceClientLogs()
	st, stateErr := readState(dir)
	if !running(dir) {
		if stateErr != nil {
			fmt.Fprintf(out, "no sandbox runs in %s\n", dir)
		} else {
			fmt.Fprintf(out, "the sandbox in %s does not run: its process (pid %d) is gone; `sandbox down` removes what it left, `sandbox up` starts a new one\n", dir, st.PID)
		}
		return &Error{Code: 1, Err: errors.New("no sandbox runs in " + dir), Reported: true}
	}
	if stateErr != nil {
		fmt.Fprintf(out, "sandbox   starting: pid %d holds %s, no state yet\n", lockPID(dir), layout{dir}.lock())
		return nil
	}
	fmt.Fprintf(out, "sandbox   running: pid %d, up %s, %s, in %s\n", st.PID, since(st.StartedAt), count(len(st.Clusters), "member cluster"), dir)
	if !st.Ready {
		at := "starting"
		if n := len(st.Steps); n > 0 {
			at = st.Steps[n-1].Name
		}
		fmt.Fprintf(out, "          still starting: %s\n", at)
		if st.Error != "" {
			fmt.Fprintf(out, "          failed: %s\n", st.Error)
			return &Error{Code: 1, Err: errors.New(st.Error), Reported: true}
		}
		return nil
	}
	c, host, err := hubClient(st.Kubeconfig, 5*time.Second)
	var fcs v1alpha1.FleetClusterList
	if err == nil {
		err = c.List(ctx, &fcs, client.InNamespace(st.Namespace))
	}
	var frs v1alpha1.FleetRolloutList
	if err == nil {
		err = c.List(ctx, &frs, client.InNamespace(st.Namespace))
	}
	if err != nil {
		fmt.Fprintf(out, "hub       does not answer at %s: %v\n", host, err)
		return &Error{Code: 1, Err: errors.New("the hub does not answer"), Reported: true}
	}
	fmt.Fprintf(out, "hub       %s answers; kubeconfig %s (namespace %s)\n", host, st.Kubeconfig, st.Namespace)
	if st.Prometheus != "" {
		fmt.Fprintf(out, "metrics   Prometheus at %s scrapes the simulator's service metrics every second\n", st.Prometheus)
	}
	fmt.Fprintf(out, "logs      %s/\n\n", st.LogDir)
	fmt.Fprint(out, statusTables(fcs.Items, frs.Items))
	return nil
}

// statusTables are the clusters and the rollouts of a sandbox, in two short tables.
func statusTables(clusters []v1alpha1.FleetCluster, rollouts []v1alpha1.FleetRollout) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tREADY\tVERSION\tRUNS")
	sort.Slice(clusters, func(i, j int) bool { return clusters[i].Name < clusters[j].Name })
	for _, fc := range clusters {
		var runs []string
		for _, r := range fc.Status.Rollouts {
			s := r.Name + "@" + commitOf(r.LiveRevision)
			if r.Drift {
				s += " (going to " + commitOf(r.DesiredRevision) + ")"
			}
			runs = append(runs, s)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", fc.Name, readyStatus(fc.Status.Conditions), orDash(fc.Status.ServerVersion), orDash(strings.Join(runs, ", ")))
	}
	tw.Flush()
	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLLOUT\tPHASE\tWAVE\tCANDIDATE\tKNOWN-GOOD\tREADY")
	sort.Slice(rollouts, func(i, j int) bool { return rollouts[i].Name < rollouts[j].Name })
	for _, fr := range rollouts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", fr.Name, orDash(fr.Status.Phase), orDash(fr.Status.CurrentWave),
			orDash(commitOf(candidateOf(&fr))), orDash(commitOf(knownGoodOf(&fr))), readyStatus(fr.Status.Conditions))
	}
	tw.Flush()
	return b.String()
}

func readyStatus(conds []metav1.Condition) string {
	c := apimeta.FindStatusCondition(conds, v1alpha1.ReadyCondition)
	if c == nil {
		return "-"
	}
	if c.Status == "True" {
		return "True"
	}
	return fmt.Sprintf("%s: %s", c.Status, clip(c.Message, 100))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// How long down waits for the background process to stop its fleet, and then for the reaper.
const (
	stopTimeout = 2 * time.Minute
	reapTimeout = 20 * time.Second
)

// down stops the sandbox in dir and removes its state; the logs stay. Idempotent.
func down(ctx context.Context, out io.Writer, dir string) error {
	st, _ := readState(dir)
	l := layout{dir}
	if !running(dir) {
		if st == nil {
			if _, err := os.Stat(l.kubeconfig()); err != nil {
				fmt.Fprintf(out, "no sandbox in %s; nothing to do\n", dir)
				return nil
			}
		} else {
			fmt.Fprintf(out, "the sandbox's process (pid %d) no longer runs\n", st.PID)
			reapLeftovers(out, st.FleetDir)
		}
		return removeAndSay(out, dir)
	}

	pid := lockPID(dir)
	if st != nil {
		pid = st.PID
	}
	if pid <= 0 {
		return failed("a process holds %s but its pid is unknown; stop it yourself", l.lock())
	}
	start := time.Now()
	fmt.Fprintf(out, "stopping the sandbox (pid %d): tidegate, the simulator, Prometheus, Flux, the API servers and etcds… ", pid)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		fmt.Fprintln(out, "failed")
		return failed("signalling pid %d: %v", pid, err)
	}
	if !waitUntil(ctx, stopTimeout, func() bool { return !running(dir) }) {
		fmt.Fprintf(out, "not stopped within %s; killing it… ", stopTimeout)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		// The fleet's reaper kills the fleet's processes once the sandbox process is gone.
		waitUntil(ctx, reapTimeout, func() bool { return !running(dir) })
	}
	if running(dir) {
		fmt.Fprintln(out, "failed")
		return failed("the sandbox process (pid %d) does not stop", pid)
	}
	fmt.Fprintf(out, "done (%s)\n", roundDuration(time.Since(start)))
	if st != nil {
		waitUntil(ctx, reapTimeout, func() bool { return len(fleetProcesses(st.FleetDir)) == 0 })
		reapLeftovers(out, st.FleetDir)
	}
	return removeAndSay(out, dir)
}

func removeAndSay(out io.Writer, dir string) error {
	l := layout{dir}
	if err := removeState(dir, false); err != nil {
		return failed("%v", err)
	}
	// A sandbox process that was killed could not copy its logs out of the fleet's directory, which
	// its reaper removed: DIR/logs is then a link to nothing.
	if _, err := os.Stat(l.logs()); err != nil {
		_ = os.Remove(l.logs())
		fmt.Fprintf(out, "removed %s and %s; the fleet's logs went with it (its process was killed), %s stays\n", l.state(), l.kubeconfig(), l.sandboxLog())
		return nil
	}
	fmt.Fprintf(out, "removed %s and %s; the logs stay in %s/ and %s\n", l.state(), l.kubeconfig(), l.logs(), l.sandboxLog())
	return nil
}

// waitUntil polls cond every 200ms until it holds (true) or timeout or ctx ends (false).
func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// fleetProcesses lists the pids of the processes whose command line names the fleet's directory:
// its API servers, etcds, Flux controllers and reaper, which localfleet starts with that directory
// in their arguments.
func fleetProcesses(fleetDir string) []int {
	if !strings.Contains(filepath.Base(fleetDir), "tidegate-fleet-") {
		return nil
	}
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), fleetDir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// reapLeftovers kills what is left of a fleet whose sandbox process died without stopping it and
// whose reaper did not get to it, and removes its directory.
func reapLeftovers(out io.Writer, fleetDir string) {
	left := fleetProcesses(fleetDir)
	for _, pid := range left {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	if len(left) > 0 {
		fmt.Fprintf(out, "killed %d leftover processes of the fleet in %s (pids %v)\n", len(left), fleetDir, left)
	}
	if fleetDir != "" && strings.Contains(filepath.Base(fleetDir), "tidegate-fleet-") {
		if _, err := os.Stat(fleetDir); err == nil {
			_ = os.RemoveAll(fleetDir)
			fmt.Fprintf(out, "removed the fleet's directory %s\n", fleetDir)
		}
	}
}
