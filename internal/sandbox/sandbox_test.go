package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/internal/ops"
	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/test/dssecheck"
	"github.com/tidegate/tidegate/verdict"
)

// mainEnv makes the test binary run the sandbox command instead of the tests: `sandbox up` re-executes
// the running binary as `sandbox run`, and in this package's tests that binary is the test binary.
const mainEnv = "TIDEGATE_SANDBOX_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(executeTo(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// executeTo runs the sandbox command under a root command, as cmd/tidegate wires it, and returns
// the exit code.
func executeTo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{Use: "tidegate"}
	root.AddCommand(NewCommand())
	return Execute(ctx, root, args, stdout, stderr)
}

// lineLogger writes each line to the test's log as it comes, so a slow or stuck run shows where it is.
type lineLogger struct {
	t   *testing.T
	buf bytes.Buffer
	all bytes.Buffer
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.all.Write(p)
	l.buf.Write(p)
	for {
		i := bytes.IndexByte(l.buf.Bytes(), '\n')
		if i < 0 {
			break
		}
		l.t.Log(string(l.buf.Next(i + 1)[:i]))
	}
	return len(p), nil
}

// The whole story, through the commands: up --demo starts a sandbox of three clusters in the
// background and plays v2 (passes), v3 (loses availability, rolled back), v4 (answers 30 % errors
// while Available, rolled back on the errorRatio its Prometheus measured), v5 (blocked, approved,
// completes); the hub then shows v5 known-good everywhere, v3 and v4 rejected, a receipt for every
// gate, the noDisruption receipts with the service metrics; status shows it running and its Prometheus;
// down leaves no process of it behind, and a second down has nothing to do. The same story runs,
// at the same time, with --oci: every release is a Flux OCI artifact in the sandbox's registry,
// signed with the sandbox's cosign key and verified by source-controller; the waves run on digests,
// and every passing deploySafe receipt says the signature was verified for its candidate's digest.
// And with --helm: every release is a chart version (0.N.0) in the registry, signed and verified
// the same way, and installed by helm-controller as a HelmRelease per member.
func TestSandboxDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three fleets of four API servers and plays the demo on each (about 5 minutes)")
	}
	t.Setenv(mainEnv, "1")
	// A killed test binary must not leave a sandbox behind.
	t.Setenv(watchPIDEnv, strconv.Itoa(os.Getpid()))
	t.Run("git", func(t *testing.T) { t.Parallel(); playDemo(t, deliverGit) })
	t.Run("oci", func(t *testing.T) { t.Parallel(); playDemo(t, deliverOCI) })
	t.Run("helm", func(t *testing.T) { t.Parallel(); playDemo(t, deliverChart) })
}

// How a test's sandbox delivers the package.
type delivery int

const (
	deliverGit delivery = iota
	deliverOCI
	deliverChart
)

// The releases each delivery plays, and their outcomes. The chart plays v1, v2 (every gate of
// every wave) and v3 (a rollback of the canary's HelmRelease to the known-good chart version), and
// stops there: v4 differs from v3 only in what the simulator does to the pods, which the other
// two deliveries show, and v5 has no chart equivalent (noChartV5); the sandbox beside two others
// is the test's longest part, so each release less is half a minute less of three fleets at once.
var storyOutcomes = map[delivery]map[string]string{
	deliverGit: {"v1": "Completed (first rollout)", "v2": "Completed", "v3": "RolledBack (rejected)",
		"v4": "RolledBack (rejected)", "v5": "Completed after approval"},
	deliverChart: {"v1": "Completed (first rollout)", "v2": "Completed", "v3": "RolledBack (rejected)"},
}

func playDemo(t *testing.T, d delivery) {
	oci, chart := d != deliverGit, d == deliverChart
	outcomes, last := storyOutcomes[deliverGit], "v5"
	if chart {
		outcomes, last = storyOutcomes[deliverChart], "v3"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "sandbox")
	var fleetDir string
	var pid int
	t.Cleanup(func() {
		var out bytes.Buffer
		if err := down(context.Background(), &out, dir); err != nil {
			t.Errorf("down in cleanup: %v\n%s", err, out.String())
		}
	})

	log := &lineLogger{t: t}
	// What NewCommand under the root command executeTo makes gives up (TestCommandTree).
	runArgs := []string{"sandbox", "run"}
	start := time.Now()
	res, err := up(ctx, log, upOptions{clusters: 3, demo: true, oci: d == deliverOCI, helm: chart, until: last, dir: dir, runArgs: runArgs, cli: "tidegate"})
	t.Logf("up --demo took %s", time.Since(start).Round(time.Second))
	if st, serr := readState(dir); serr == nil {
		fleetDir, pid = st.FleetDir, st.PID
	}
	if err != nil {
		t.Fatalf("up --demo: %v", err)
	}
	output := log.all.String()

	// The story's releases and their outcomes.
	if len(res.Releases) != len(outcomes) {
		t.Fatalf("releases %+v", res.Releases)
	}
	for _, r := range res.Releases {
		want := map[delivery]string{deliverGit: "main@sha1:", deliverOCI: ociTag + "@sha256:", deliverChart: chartVersion(r.Label) + "@sha256:"}[d]
		if !strings.HasPrefix(r.Revision, want) {
			t.Errorf("release %s is revision %s, want %s<...>", r.Label, r.Revision, want)
		}
	}
	rev := map[string]string{}
	for _, r := range res.Releases {
		rev[r.Label] = r.Revision
	}
	for label, outcome := range outcomes {
		found := false
		for _, r := range res.Releases {
			found = found || (r.Label == label && r.Outcome == outcome)
		}
		if !found {
			t.Errorf("release %s should be %q: %+v", label, outcome, res.Releases)
		}
	}

	st, err := readState(dir)
	if err != nil {
		t.Fatal(err)
	}
	hub := hubOf(t, st)
	var fr v1alpha1.FleetRollout
	if err := hub.Get(ctx, types.NamespacedName{Namespace: fleetNamespace, Name: rolloutName}, &fr); err != nil {
		t.Fatal(err)
	}
	// The chart's story ends on v3 rolled back (it plays no v4 or v5): the rollout stays RolledBack,
	// at v2, until a new revision comes.
	final := map[bool]string{false: "v5", true: "v2"}[chart]
	phase := map[bool]string{false: v1alpha1.PhaseCompleted, true: v1alpha1.PhaseRolledBack}[chart]
	if fr.Status.Phase != phase || knownGoodOf(&fr) != rev[final] || !fr.IsRejected(rev["v3"]) || (!chart && !fr.IsRejected(rev["v4"])) {
		t.Errorf("the rollout should end %s at %s with v3 (and v4) rejected: %s, rejected %+v", phase, final, describeRollout(&fr, func(s string) string { return s }), fr.Status.Rejected)
	}
	if chart {
		checkChartMembers(ctx, t, hub, st, rev["v2"])
	}

	// Every cluster runs v5, with db's bigger volume.
	for _, member := range st.Clusters {
		if chart {
			break
		}
		var ks kustomizev1.Kustomization
		if err := hub.Get(ctx, types.NamespacedName{Namespace: fleetNamespace, Name: v1alpha1.KustomizationName(rolloutName, member)}, &ks); err != nil {
			t.Fatal(err)
		}
		if !engine.SameRevision(ks.Status.LastAppliedRevision, rev["v5"]) || oci != (ks.Status.LastAppliedRevision == digestOf(rev["v5"])) {
			t.Errorf("%s's Kustomization applied %s, want v5 %s", member, ks.Status.LastAppliedRevision, rev["v5"])
		}
		mc := memberClient(ctx, t, hub, member)
		var cm corev1.ConfigMap
		if err := mc.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: "podinfo"}, &cm); err != nil || cm.Data["version"] != "v5" || cm.Data["logLevel"] != "info" {
			t.Errorf("%s: ConfigMap podinfo %v (%v), want version v5 and logLevel info", member, cm.Data, err)
		}
		var db appsv1.StatefulSet
		if err := mc.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: "db"}, &db); err != nil {
			t.Errorf("%s: StatefulSet db: %v", member, err)
		} else if got := db.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String(); got != "2Gi" {
			t.Errorf("%s: db's volume is %s, want 2Gi", member, got)
		}
	}

	// A receipt for every gate: each wave of v2 passed all of its gates; v3 and v4 failed
	// noDisruption on the canary; v5 failed rollbackSafe, then passed it with the demo's approval.
	// The summary names every one of them.
	var receipts v1alpha1.GateReceiptList
	if err := hub.List(ctx, &receipts, client.InNamespace(fleetNamespace)); err != nil {
		t.Fatal(err)
	}
	decided := map[string]int{}
	for _, rc := range receipts.Items {
		s := rc.Spec
		decided[s.Candidate.Revision+" "+s.Wave+" "+s.Gate+" "+s.Result]++
		for _, r := range res.Releases {
			if r.Revision == s.Candidate.Revision && !strings.Contains(res.Summary, rc.Name) {
				t.Errorf("the summary does not list receipt %s", rc.Name)
			}
		}
		if oci && s.Gate == v1alpha1.GateDeploySafe && s.Result == v1alpha1.ResultPass {
			// A chart's source is verified as an OCI artifact's is.
			ev := evidenceOf[verdict.DeploySafeEvidence](t, rc)
			if !ev.Source.Verified || ev.Source.Verification != "cosign" || ev.Source.Revision != digestOf(s.Candidate.Revision) {
				t.Errorf("receipt %s: deploySafe passed on source %+v, want cosign's verification of %s", rc.Name, ev.Source, digestOf(s.Candidate.Revision))
			}
		}
		if s.Gate == v1alpha1.GateRollbackSafe && s.Candidate.Revision == rev["v5"] && s.Result == v1alpha1.ResultPass &&
			(len(s.Approvals) != 1 || s.Approvals[0].By != "demo" || !s.Approvals[0].Irreversible) {
			t.Errorf("v5's passing rollbackSafe receipt should record the demo's approval: %+v", s.Approvals)
		}
		if s.Gate == v1alpha1.GateNoDisruption {
			checkServiceMetrics(t, rc, s.Candidate.Revision == rev["v4"], s.Candidate.Revision == rev["v2"])
		}
	}
	for _, want := range []string{
		"v2 canary deploySafe Pass", "v2 canary rollbackSafe Pass", "v2 canary rollbackSucceeds Pass", "v2 canary noDisruption Pass",
		"v2 ring deploySafe Pass", "v2 ring rollbackSucceeds Pass", "v2 ring noDisruption Pass",
		"v2 rest deploySafe Pass", "v2 rest rollbackSucceeds Pass", "v2 rest noDisruption Pass",
		"v3 canary noDisruption Fail", "v4 canary noDisruption Fail",
		"v5 canary rollbackSafe Fail", "v5 canary rollbackSafe Pass", "v5 rest noDisruption Pass",
	} {
		f := strings.Fields(want)
		if _, played := outcomes[f[0]]; !played {
			continue
		}
		if decided[rev[f[0]]+" "+f[1]+" "+f[2]+" "+f[3]] == 0 {
			t.Errorf("no receipt: %s", want)
		}
	}
	wants := []string{"REVISION", "v3", "RolledBack (rejected)", "noDisruption failed in wave canary",
		"tidegate status podinfo --kubeconfig " + st.Kubeconfig, "Service metrics: Prometheus at " + st.Prometheus}
	if chart {
		wants = append(wants, "committed Chart.yaml to the podinfo repository, pushed as chart podinfo 0.3.0: 0.3.0@sha256:",
			"pushing podinfo to the OCI registry as a signed Helm chart", "release a version in Chart.yaml")
	} else {
		wants = append(wants, "approved by demo", "Completed after approval", "rollbackSafe failed in wave canary", "errorRatio's mean over the soak")
	}
	for _, want := range wants {
		if !strings.Contains(output, want) {
			t.Errorf("the output should say %q", want)
		}
	}
	if strings.Contains(output, "FAILED") {
		t.Errorf("the output reports a failure")
	}

	// Every receipt is signed with the sandbox's key, and each release's ledger verifies with it.
	pubPEM, err := os.ReadFile(filepath.Join(dir, signingPubName))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := attest.ParsePublicKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range receipts.Items {
		if rc.Spec.Signature == nil || rc.Spec.Signature.KeyID != pub.KeyID() {
			t.Errorf("receipt %s is not signed by the sandbox's key %s: %+v", rc.Name, pub.KeyID(), rc.Spec.Signature)
		}
	}
	independent, err := dssecheck.New(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Releases {
		b, missing, err := ops.ExportBundle(ctx, hub, fleetNamespace, rolloutName, r.Revision)
		if err != nil || len(missing) > 0 {
			t.Fatalf("exporting the ledger of %s: %v (missing %v)", r.Label, err, missing)
		}
		if v := attest.Verify(b, attest.NewKeySet(pub)); !v.Verified {
			t.Errorf("the record of %s does not verify: %+v", r.Label, v.Failures())
		}
		// And every envelope of it with go-securesystemslib's DSSE verifier, not tidegate's.
		for _, br := range b.Receipts {
			if _, err := independent.Verify(br.Receipt.Spec.Signature.Envelope); err != nil {
				t.Errorf("%s: the independent verifier refuses receipt %s: %v", r.Label, br.Receipt.Name, err)
			}
		}
		for i, e := range b.Ledger.Spec.Entries {
			if _, err := independent.Verify(e.Signature.Envelope); err != nil {
				t.Errorf("%s: the independent verifier refuses ledger entry %d: %v", r.Label, i, err)
			}
		}
		if !regexpMatch(`(?m)^`+r.Label+`\s+\S+-ledger-\S+\s+\d+\s+(\d+)\s+(\d+) of (\d+)\s+\S+\s+yes$`, res.Record) {
			t.Errorf("the demo's record should show %s's ledger signed and verified:\n%s", r.Label, res.Record)
		}
	}
	if !strings.Contains(output, "The record of each release, signed by the sandbox's key "+pub.KeyID()[:12]) {
		t.Errorf("the output should say the record is signed by the sandbox's key")
	}

	// A second sandbox in the same directory is refused while this one runs.
	var again bytes.Buffer
	if _, err := up(ctx, &again, upOptions{clusters: 1, dir: dir, runArgs: runArgs, cli: "tidegate"}); err == nil || !strings.Contains(err.Error(), "already runs") {
		t.Errorf("a second up in %s: %v", dir, err)
	}

	var out bytes.Buffer
	if code := executeTo(ctx, []string{"sandbox", "status", "--dir", dir}, &out, &out); code != 0 ||
		!strings.Contains(out.String(), "running: pid "+strconv.Itoa(pid)) || !regexpMatch(`podinfo\s+`+phase, out.String()) ||
		st.Prometheus == "" || !strings.Contains(out.String(), "Prometheus at "+st.Prometheus) {
		t.Errorf("status exited %d:\n%s", code, out.String())
	}
	t.Logf("status:\n%s", out.String())

	out.Reset()
	start = time.Now()
	if code := executeTo(ctx, []string{"sandbox", "down", "--dir", dir}, &out, &out); code != 0 || !strings.Contains(out.String(), "stopping the sandbox (pid "+strconv.Itoa(pid)) {
		t.Errorf("down exited %d:\n%s", code, out.String())
	}
	t.Logf("down took %s:\n%s", time.Since(start).Round(time.Second), out.String())
	if running(dir) {
		t.Errorf("the sandbox still holds its lock after down")
	}
	if !waitUntil(ctx, 10*time.Second, func() bool { return !alive(pid) }) {
		t.Errorf("the sandbox process %d is alive after down", pid)
	}
	if fleetDir == "" {
		t.Errorf("the state did not name the fleet's directory")
	} else if left := fleetProcesses(fleetDir); len(left) > 0 {
		t.Errorf("processes of the fleet left after down: %v", left)
	} else if _, err := os.Stat(fleetDir); err == nil {
		t.Errorf("the fleet's directory %s is left after down", fleetDir)
	}
	for _, p := range []string{layout{dir}.state(), layout{dir}.kubeconfig()} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is left after down", p)
		}
	}
	logs := []string{"tidegate-controller.log", "kustomize-controller.log", "source-controller.log", "simulator.log", "hub-kube-apiserver.log"}
	if chart {
		logs = append(logs, "helm-controller.log")
	}
	for _, name := range logs {
		if info, err := os.Stat(filepath.Join(dir, logsDirName, name)); err != nil || info.Size() == 0 {
			t.Errorf("log %s should be kept after down: %v", name, err)
		}
	}

	// The background process stopped cleanly: no panic, no data race under -race.
	if b, err := os.ReadFile(layout{dir}.sandboxLog()); err != nil || !strings.Contains(string(b), " stopped\n") ||
		strings.Contains(string(b), "DATA RACE") || strings.Contains(string(b), "panic:") {
		t.Errorf("the sandbox process's log (%v):\n%s", err, b)
	}

	out.Reset()
	if code := executeTo(ctx, []string{"sandbox", "down", "--dir", dir}, &out, &out); code != 0 || !strings.Contains(out.String(), "nothing to do") {
		t.Errorf("a second down exited %d:\n%s", code, out.String())
	}
	out.Reset()
	if code := executeTo(ctx, []string{"sandbox", "status", "--dir", dir}, &out, &out); code != 1 || !strings.Contains(out.String(), "no sandbox runs") {
		t.Errorf("status without a sandbox exited %d:\n%s", code, out.String())
	}
}

// checkServiceMetrics checks a noDisruption receipt's service metrics, which the demo policy's
// queries read at the sandbox's Prometheus: v4's canary failed on its error ratio, the receipt
// naming the query, the canary, its mean and the baseline's (the clusters still at v2, without
// errors); every wave of v2 passed with points for both queries and no error.
func checkServiceMetrics(t *testing.T, rc v1alpha1.GateReceipt, v4, v2 bool) {
	t.Helper()
	s := rc.Spec
	if !(v4 && s.Wave == "canary" && s.Result == v1alpha1.ResultFail) && !(v2 && s.Result == v1alpha1.ResultPass) {
		return
	}
	ev := evidenceOf[verdict.NoDisruptionEvidence](t, rc)
	if ev.Metrics == nil || len(ev.Clusters) == 0 {
		t.Errorf("receipt %s (wave %s) has no service metrics: %+v", rc.Name, s.Wave, ev.Metrics)
		return
	}
	if v2 {
		for _, c := range ev.Clusters {
			for _, q := range []string{"errorRatio", "latencyP95"} {
				if m, ok := c.Metrics[q]; !ok || m.Count == 0 || (q == "errorRatio" && m.Max != 0) {
					t.Errorf("v2's receipt %s, cluster %s: %s %+v (ok %v), want points and no error", rc.Name, c.Name, q, m, ok)
				}
			}
		}
		return
	}
	canary := ev.Clusters[0].Name
	reasons := strings.Join(s.Reasons, "\n")
	for _, want := range []string{"cluster " + canary + ": errorRatio's mean over the soak", "the baseline's mean is 0"} {
		if !strings.Contains(reasons, want) {
			t.Errorf("v4's failed noDisruption receipt %s should say %q: %q", rc.Name, want, s.Reasons)
		}
	}
	m, b := ev.Clusters[0].Metrics["errorRatio"], ev.Metrics.Baseline["errorRatio"]
	if m.Mean <= 0.01 || m.Max < 0.25 || b.Kind != verdict.BaselineNotYetUpdated || len(b.Clusters) == 0 || b.Mean != 0 {
		t.Errorf("v4's canary %s: errorRatio %+v against the baseline %+v, want a mean above 1 %%, near %.1f at its most, and a baseline of clusters at v2 without errors",
			canary, m, b, v4ErrorRatio)
	}
}

// evidenceOf is the evidence a receipt recorded, as the gate's evidence type E.
func evidenceOf[E any](t *testing.T, rc v1alpha1.GateReceipt) E {
	t.Helper()
	var ev E
	raw, err := rc.Spec.StoredEvidence(nil)
	if err == nil {
		err = json.Unmarshal(raw, &ev)
	}
	if err != nil {
		t.Fatalf("the evidence of receipt %s: %v", rc.Name, err)
	}
	return ev
}

func hubOf(t *testing.T, st *State) client.Client {
	t.Helper()
	c, _, err := hubClient(st.Kubeconfig, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// memberClient reaches a member cluster through its kubeconfig Secret on the hub, as Flux does.
func memberClient(ctx context.Context, t *testing.T, hub client.Client, member string) client.Client {
	t.Helper()
	var s corev1.Secret
	if err := hub.Get(ctx, types.NamespacedName{Namespace: fleetNamespace, Name: member + "-kubeconfig"}, &s); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["value"])
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// alive tells whether pid is a running process (a zombie is not).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses: "pid (comm) S ...".
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// digestOf is the digest (OCI) or commit a Flux revision names: its part after the last "@".
func digestOf(rev string) string {
	_, digest, _ := engine.SplitRevision(rev)
	return digest
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }

// checkChartMembers checks a --helm sandbox at the end of its story: one HelmRelease per member on
// the hub, Ready, its last release chart v2's version (helm-controller records it with the
// artifact's digest: 0.2.0+<hex>), one of them (the canary's) having released v3's and gone back;
// on every member the release's objects at v2, in the namespace podinfo, stored by Helm there.
func checkChartMembers(ctx context.Context, t *testing.T, hub client.Client, st *State, v2 string) {
	t.Helper()
	hrs := &unstructured.UnstructuredList{}
	hrs.SetGroupVersionKind(helmReleaseList)
	if err := hub.List(ctx, hrs, client.InNamespace(fleetNamespace)); err != nil {
		t.Fatal(err)
	}
	if len(hrs.Items) != len(st.Clusters) {
		t.Errorf("%d HelmReleases on the hub, want one for each of %v", len(hrs.Items), st.Clusters)
	}
	wentBack := 0
	for _, hr := range hrs.Items {
		var history []string
		raw, _, _ := unstructured.NestedSlice(hr.Object, "status", "history")
		for _, h := range raw {
			v, _, _ := unstructured.NestedString(h.(map[string]any), "chartVersion")
			history = append(history, v)
		}
		ready := apimeta.FindStatusCondition(unstructuredConditions(&hr), "Ready")
		if ready == nil || ready.Status != metav1.ConditionTrue || len(history) == 0 || !strings.HasPrefix(history[0], chartVersion("v2")+"+") {
			t.Errorf("HelmRelease %s: Ready %+v, history %v; want Ready at chart %s (%s)", hr.GetName(), ready, history, chartVersion("v2"), v2)
		}
		if slices.ContainsFunc(history, func(v string) bool { return strings.HasPrefix(v, chartVersion("v3")+"+") }) {
			wentBack++
		}
	}
	if wentBack != 1 {
		t.Errorf("%d HelmReleases released v3 and went back, want the canary's", wentBack)
	}
	for _, member := range st.Clusters {
		mc := memberClient(ctx, t, hub, member)
		var cm corev1.ConfigMap
		if err := mc.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: "podinfo"}, &cm); err != nil || cm.Data["version"] != "v2" || cm.Data["logLevel"] != "info" {
			t.Errorf("%s: ConfigMap podinfo %v (%v), want version v2 and logLevel info", member, cm.Data, err)
		}
		var web appsv1.Deployment
		if err := mc.Get(ctx, types.NamespacedName{Namespace: appNamespace, Name: "web"}, &web); err != nil || web.Spec.Template.Spec.Containers[0].Image != "ghcr.io/example/podinfo:v2" {
			t.Errorf("%s: Deployment web (%v), want image :v2", member, err)
		}
		var stored corev1.SecretList
		if err := mc.List(ctx, &stored, client.InNamespace(appNamespace), client.MatchingLabels{"owner": "helm", "name": rolloutName, "status": "deployed"}); err != nil || len(stored.Items) != 1 {
			t.Errorf("%s: Helm's record of the deployed release %s in %s: %d (%v), want 1", member, rolloutName, appNamespace, len(stored.Items), err)
		}
	}
}
