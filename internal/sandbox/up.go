package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"slices"

	"strings"
	"syscall"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/go-logr/logr"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/sandboxcmd"
	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/testbin"
)

type upOptions struct {
	clusters int
	demo     bool
	// oci delivers the package as signed OCI artifacts (sandbox run --oci).
	oci bool
	// helm delivers the package as a signed Helm chart (sandbox run --helm).
	helm bool
	// until, when set, is the last release the demo plays (v2, v3, …): the tests play a shorter
	// story.
	until string
	dir   string
	// runArgs run the background process from the root command (["sandbox", "run"]).
	runArgs []string
	// cli is how the user's shell runs the tidegate CLI, for the hints printed (sandboxcmd.CLI).
	cli string
	// exe is the binary to start as the background process; the running one when empty.
	exe string
	// testbin is the directory of the test binaries (--testbin); up resolves it and hands the
	// result to the background process, so that both use the same binaries.
	testbin string
}

// How long up waits for each part.
const (
	startTimeout   = 6 * time.Minute
	hubTimeout     = 3 * time.Minute
	releaseTimeout = 6 * time.Minute
)

// up starts the sandbox in the background, follows it until the first rollout completed, plays the
// demo when asked, and says how to look around.
func up(ctx context.Context, out io.Writer, o upOptions) (*demoResult, error) {
	silenceClientLogs()
	bin, err := testbin.Dir(o.testbin)
	if err != nil {
		return nil, failed("the sandbox runs the test binaries (--testbin): %v", err)
	}
	o.testbin = bin
	// Checked here too, so that a missing build fails before the fleet takes a minute to start.
	if _, err := testbin.Prometheus(); err != nil {
		return nil, failed("the sandbox runs Prometheus to hold its service metrics: %v", err)
	}
	if o.helm {
		if _, _, err := testbin.HelmController(); err != nil {
			return nil, failed("--helm runs Flux's helm-controller, which installs the chart: %v", err)
		}
	}
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return nil, failed("creating %s: %v", o.dir, err)
	}
	if running(o.dir) {
		msg := "a sandbox already runs in " + o.dir
		if st, err := readState(o.dir); err == nil {
			msg += fmt.Sprintf(" (pid %d, up %s)", st.PID, since(st.StartedAt))
		}
		return nil, failed("%s: %s shows it, %s stops it", msg, sandboxCmd(o.cli, "status", o.dir), sandboxCmd(o.cli, "down", o.dir))
	}
	if st, err := readState(o.dir); err == nil {
		fmt.Fprintf(out, "Removing the state of a sandbox that no longer runs (pid %d).\n", st.PID)
	}
	if err := removeState(o.dir, true); err != nil {
		return nil, failed("%v", err)
	}

	fmt.Fprintf(out, "Starting a sandbox in %s: a hub and %s on this machine.\n", o.dir, count(o.clusters, "member cluster"))
	child, err := spawn(o)
	if err != nil {
		return nil, failed("starting the sandbox process: %v", err)
	}
	fmt.Fprintf(out, "  started the sandbox process (pid %d; its output goes to %s)\n", child.pid, layout{o.dir}.sandboxLog())
	st, err := follow(ctx, out, o, child)
	if err != nil {
		return nil, err
	}

	d, err := newDriver(out, st, o.cli)
	if err != nil {
		return nil, d.fail("connecting to the hub", err)
	}
	if err := d.waitHub(ctx); err != nil {
		return nil, d.fail("waiting for Flux to apply the fleet repository's ./hub", err)
	}
	if err := d.firstRollout(ctx); err != nil {
		return nil, d.fail("the first rollout of podinfo (v1)", err)
	}
	var res *demoResult
	if o.demo {
		if res, err = d.story(ctx, o.until); err != nil {
			return res, err
		}
	}
	d.lookAround()
	return res, nil
}

// silenceClientLogs keeps client-go and controller-runtime from logging on the terminal: the
// commands say what went wrong themselves.
func silenceClientLogs() {
	klog.SetLogger(logr.Discard())
	klog.SetOutput(io.Discard)
	ctrllog.SetLogger(logr.Discard())
}

// removeState removes what a sandbox that no longer runs left: its state, its kubeconfig and, with
// logs, its logs.
func removeState(dir string, logs bool) error {
	l := layout{dir}
	paths := []string{l.state(), l.kubeconfig()}
	if logs {
		paths = append(paths, l.logs())
	}
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", p, err)
		}
	}
	return nil
}

// child is the background process, as seen by the up that started it.
type child struct {
	pid    int
	exited chan struct{}
	err    error
}

// spawn starts the background process in a session of its own, so that it outlives up and a
// Ctrl-C in up's terminal does not reach it.
func spawn(o upOptions) (*child, error) {
	exe := o.exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	logFile, err := os.OpenFile(layout{o.dir}.sandboxLog(), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	run := sandboxcmd.RunOptions{Clusters: o.clusters, OCI: o.oci, Helm: o.helm, Dir: o.dir, Testbin: o.testbin}
	args := append(slices.Clone(o.runArgs), run.Args()...)
	cmd := exec.Command(exe, args...)
	cmd.Dir = o.dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// follow prints the background process's start-up steps as its state records them, and returns
// the state once it is ready.
func follow(ctx context.Context, out io.Writer, o upOptions, c *child) (*State, error) {
	l := layout{o.dir}
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	printed, started := 0, -1
	var last *State
	show := func() *State {
		st, err := readState(o.dir)
		if err != nil || st.PID != c.pid {
			return nil
		}
		last = st
		for i := printed; i < len(st.Steps); i++ {
			s := st.Steps[i]
			if started < i {
				fmt.Fprintf(out, "  %s… ", s.Name)
				started = i
			}
			if s.Done == nil {
				break
			}
			if s.Error != "" {
				fmt.Fprintln(out, "failed")
			} else {
				fmt.Fprintf(out, "done (%s)\n", roundDuration(s.Done.Sub(s.Started)))
			}
			printed = i + 1
		}
		return st
	}
	startFailed := func(what string) error {
		if started >= printed {
			fmt.Fprintln(out)
		}
		fmt.Fprintf(out, "\nFAILED: starting the sandbox: %s\n", what)
		fmt.Fprintf(out, "  the last lines of %s:\n%s", l.sandboxLog(), indent(tail(l.sandboxLog(), 15), "    "))
		fmt.Fprintf(out, "  logs: %s\n", logList(l.logs()))
		return &Error{Code: 1, Err: errors.New("the sandbox did not start: " + what), Reported: true}
	}
	for {
		if st := show(); st != nil {
			if st.Error != "" {
				// The process stops its fleet and exits on its own.
				select {
				case <-c.exited:
				case <-time.After(time.Minute):
				}
				if final := show(); final != nil && final.Error != "" {
					st = final
				}
				return nil, startFailed(st.Error)
			}
			if st.Ready {
				return st, nil
			}
		}
		select {
		case <-c.exited:
			if st := show(); st != nil && st.Error != "" {
				return nil, startFailed(st.Error)
			}
			return nil, startFailed(fmt.Sprintf("the sandbox process exited before it was ready (%v)", c.err))
		case <-ctx.Done():
			fmt.Fprintf(out, "\ninterrupted: the sandbox keeps starting in the background; %s shows it, %s stops it\n", sandboxCmd(o.cli, "status", o.dir), sandboxCmd(o.cli, "down", o.dir))
			return nil, &Error{Code: 1, Err: errors.New("interrupted"), Reported: true}
		case <-deadline.C:
			what := fmt.Sprintf("not ready within %s", startTimeout)
			if last != nil && len(last.Steps) > 0 {
				what += " (at: " + last.Steps[len(last.Steps)-1].Name + ")"
			}
			return nil, startFailed(what + "; it still runs: " + sandboxCmd(o.cli, "down", o.dir) + " stops it")
		case <-tick.C:
		}
	}
}

// hubClient returns a client of the hub through the sandbox's kubeconfig.
func hubClient(kubeconfig string, timeout time.Duration) (client.Client, string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, "", fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	cfg.Timeout = timeout
	cfg.QPS, cfg.Burst = 50, 100
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		return nil, cfg.Host, fmt.Errorf("connecting to the hub at %s: %w", cfg.Host, err)
	}
	return c, cfg.Host, nil
}

// driver acts on a running sandbox and reports what it sees: up's waits and the demo story.
type driver struct {
	out    io.Writer
	c      client.Client
	st     *State
	ctl    *controlClient
	cli    string
	labels map[string]string // revision → release name (v1, v2, …)
	watch  *watcher
}

func newDriver(out io.Writer, st *State, cli string) (*driver, error) {
	d := &driver{out: out, st: st, cli: cli, labels: map[string]string{}}
	if rev := st.Initial[repoPodinfo]; rev != "" {
		d.labels[rev] = "v1"
	}
	d.watch = newWatcher(out, d.label)
	if st.Control != nil {
		d.ctl = newControlClient(st.Control)
	}
	c, _, err := hubClient(st.Kubeconfig, 15*time.Second)
	d.c = c
	return d, err
}

// chart tells whether the sandbox delivers the package as a Helm chart (--helm).
func (d *driver) chart() bool { return d.st.OCI != nil && d.st.OCI.Chart }

// pkg is the package as the sandbox committed it.
func (d *driver) pkg() pkgLayout {
	if d.chart() {
		return chartPackage
	}
	return kustomizePackage
}

// label names a revision for people: its release name when the sandbox committed it, else its
// short commit.
func (d *driver) label(rev string) string {
	if l, ok := d.labels[rev]; ok {
		return l
	}
	return shortRevision(rev)
}

// waitHub waits until Flux applied ./hub: the bootstrap Kustomization Ready, every FleetCluster and
// the rollout there.
func (d *driver) waitHub(ctx context.Context) error {
	start := time.Now()
	fmt.Fprintf(d.out, "  waiting for Flux to apply ./hub of the fleet repository: %s and the FleetRollout %s… ", count(len(d.st.Clusters), "FleetCluster"), rolloutName)
	err := poll(ctx, hubTimeout, func() (bool, string, error) {
		var ks kustomizev1.Kustomization
		if err := d.c.Get(ctx, types.NamespacedName{Namespace: bootstrapNS, Name: bootstrapName}, &ks); err != nil {
			return false, "Kustomization " + bootstrapNS + "/" + bootstrapName + ": " + err.Error(), nil
		}
		if c := apimeta.FindStatusCondition(ks.Status.Conditions, "Ready"); c == nil || c.Status != "True" {
			return false, "Kustomization " + bootstrapNS + "/" + bootstrapName + " is not Ready: " + conditionText(c), nil
		}
		var fcs v1alpha1.FleetClusterList
		if err := d.c.List(ctx, &fcs, client.InNamespace(d.st.Namespace)); err != nil {
			return false, err.Error(), nil
		}
		if len(fcs.Items) < len(d.st.Clusters) {
			return false, fmt.Sprintf("%d of %d FleetClusters", len(fcs.Items), len(d.st.Clusters)), nil
		}
		var fr v1alpha1.FleetRollout
		if err := d.c.Get(ctx, types.NamespacedName{Namespace: d.st.Namespace, Name: rolloutName}, &fr); err != nil {
			return false, "FleetRollout " + d.st.Namespace + "/" + rolloutName + ": " + err.Error(), nil
		}
		return true, "", nil
	})
	if err != nil {
		fmt.Fprintln(d.out, "failed")
		return err
	}
	fmt.Fprintf(d.out, "done (%s)\n", roundDuration(time.Since(start)))
	return nil
}

// firstRollout follows the rollout of the package's first commit until it runs everywhere.
func (d *driver) firstRollout(ctx context.Context) error {
	rev := d.st.Initial[repoPodinfo]
	fmt.Fprintf(d.out, "  the first rollout of podinfo, v1 (%s); a first rollout has no known-good to go back to:\n", shortRevision(rev))
	start := d.watch.reset()
	fr, err := d.waitRollout(ctx, func(fr *v1alpha1.FleetRollout) (bool, error) {
		if candidateOf(fr) != rev {
			return false, nil
		}
		switch fr.Status.Phase {
		case v1alpha1.PhaseCompleted:
			return true, nil
		case v1alpha1.PhaseHeld, v1alpha1.PhaseRolledBack:
			return false, fmt.Errorf("v1 is %s: it should run everywhere; %s", fr.Status.Phase, whyNotCompleted(fr))
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "  v1 runs on %d clusters, and is the known-good (%s)\n", clustersOf(fr), roundDuration(time.Since(start)))
	return nil
}

// waitRollout follows the rollout, printing every change, until done says it is done or fails.
func (d *driver) waitRollout(ctx context.Context, done func(*v1alpha1.FleetRollout) (bool, error)) (*v1alpha1.FleetRollout, error) {
	var fr *v1alpha1.FleetRollout
	err := poll(ctx, releaseTimeout, func() (bool, string, error) {
		var got v1alpha1.FleetRollout
		if err := d.c.Get(ctx, types.NamespacedName{Namespace: d.st.Namespace, Name: rolloutName}, &got); err != nil {
			return false, "FleetRollout " + d.st.Namespace + "/" + rolloutName + ": " + err.Error(), nil
		}
		fr = &got
		d.watch.observe(fr)
		if c := apimeta.FindStatusCondition(fr.Status.Conditions, v1alpha1.StalledCondition); c != nil && c.Status == "True" {
			return false, "", fmt.Errorf("the rollout is stalled (%s): %s", c.Reason, c.Message)
		}
		ok, err := done(fr)
		return ok, describeRollout(fr, d.label), err
	})
	return fr, err
}

// poll calls check every half second until it is done, fails, or timeout or ctx ends; the error
// then carries check's last observation.
func poll(ctx context.Context, timeout time.Duration, check func() (done bool, seen string, err error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	seen := ""
	for {
		done, s, err := check()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		seen = s
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("not done within %s; last seen: %s", timeout, seen)
			}
			return fmt.Errorf("interrupted; last seen: %s", seen)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// fail reports a failed step of up or of the demo: what failed, what is not Ready on the hub, where
// the logs are; the sandbox keeps running.
func (d *driver) fail(step string, err error) error {
	fmt.Fprintf(d.out, "\nFAILED: %s: %v\n", step, err)
	if d.c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if t := describeTrouble(ctx, d.c, d.st.Namespace); t != "" {
			fmt.Fprintf(d.out, "  not Ready on the hub:\n%s", indent(t, "    "))
		}
	}
	l := layout{d.st.Dir}
	fmt.Fprintf(d.out, "  logs: %s, and %s\n", logList(l.logs()), l.sandboxLog())
	fmt.Fprintf(d.out, "  the sandbox keeps running so that you can look around (kubeconfig %s); %s stops it\n",
		l.kubeconfig(), sandboxCmd(d.cli, "down", d.st.Dir))
	return &Error{Code: 1, Err: fmt.Errorf("%s: %w", step, err), Reported: true}
}

// lookAround says how to look at the sandbox.
func (d *driver) lookAround() {
	l := layout{d.st.Dir}
	kc := l.kubeconfig()
	fmt.Fprintf(d.out, `
The sandbox runs in the background. Look around (the kubeconfig's namespace is %[3]s):
  %[1]s status %[2]s --kubeconfig %[4]s
  %[1]s get receipts --kubeconfig %[4]s
  kubectl get fleetclusters,fleetrollouts,gatereceipts -n %[3]s --kubeconfig %[4]s
%[11]sChange it with commits, as a platform team would (see the README.md of each repository):
  git clone -b main %[5]s      # the package: release a version in %[13]s
  git clone -b main %[6]s        # the hub objects: clusters, the rollout, sources
  git clone -b main %[7]s   # the policy
%[12]sLogs: %[8]s/ (tidegate-controller, source-controller, kustomize-controller, simulator, API servers)
%[9]s shows the sandbox, %[10]s stops it.
`, d.cli, rolloutName, d.st.Namespace, kc, d.st.Git[repoPodinfo], d.st.Git[repoFleet], d.st.Git[repoPolicies], l.logs(),
		sandboxCmd(d.cli, "status", d.st.Dir), sandboxCmd(d.cli, "down", d.st.Dir), fluxHint(kc, d.chart()), prometheusHint(d.st.Prometheus), d.pkg().releaseFile)
}

// prometheusHint says where the service metrics the policy's queries read are, and how to ask
// one as noDisruption does (its {{clusters}} put in), when the sandbox runs a Prometheus.
func prometheusHint(url string) string {
	if url == "" {
		return ""
	}
	return fmt.Sprintf(`Service metrics: Prometheus at %[1]s scrapes the simulator's traffic every second (the rollout's
spec.metrics; the policy's settings.metrics.queries are asked there). Ask it yourself:
  curl -s %[1]s/api/v1/query --data-urlencode 'query=sum by (cluster) (rate(http_requests_total{code="500",namespace="%[2]s"}[5s]))'
`, url, appNamespace)
}

// fluxHint is the hint line that lists the Kustomizations (the HelmReleases, for a chart) with the
// Flux CLI, when there is one to run.
func fluxHint(kubeconfig string, chart bool) string {
	flux := fluxCommand()
	if flux == "" {
		return ""
	}
	what := "kustomizations"
	if chart {
		what = "helmreleases"
	}
	return fmt.Sprintf("  %s get %s -A --kubeconfig %s\n", flux, what, kubeconfig)
}

func candidateOf(fr *v1alpha1.FleetRollout) string {
	if fr.Status.Candidate == nil {
		return ""
	}
	return fr.Status.Candidate.Revision
}

func knownGoodOf(fr *v1alpha1.FleetRollout) string {
	if fr.Status.LastKnownGood == nil {
		return ""
	}
	return fr.Status.LastKnownGood.Revision
}

func clustersOf(fr *v1alpha1.FleetRollout) int {
	n := 0
	for _, w := range fr.Status.Waves {
		n += len(w.Clusters)
	}
	return n
}

// shortRevision is a revision's commit cut to 12 characters: "main@sha1:0123456789ab".
func shortRevision(rev string) string {
	i := strings.LastIndex(rev, ":")
	if i < 0 || len(rev)-i-1 <= 12 {
		return rev
	}
	return rev[:i+13]
}

func roundDuration(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// count is "1 thing" or "n things".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Second) }

func indent(s, prefix string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return prefix + strings.Join(lines, "\n"+prefix) + "\n"
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")\n"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// logList names a log directory and the logs in it.
func logList(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return dir + "/ (empty)"
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return dir + "/{" + strings.Join(names, ",") + "}"
}
