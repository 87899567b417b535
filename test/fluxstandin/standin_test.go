package fluxstandin_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/fluxstandin"
	"github.com/tidegate/tidegate/test/testenv"
)

var (
	cfg    *rest.Config
	hub    client.WithWatch
	envErr error
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithEnvironment(m, func() (*envtest.Environment, error) {
		env, err := testbin.NewEnvironment("", testbin.FluxCRDs)
		if err != nil {
			envErr = err
			return nil, err
		}
		if cfg, envErr = env.Start(); envErr != nil {
			_ = env.Stop()
			return nil, envErr
		}
		hub, envErr = client.NewWithWatch(cfg, client.Options{Scheme: scheme.New()})
		return env, envErr
	}))
}

// start runs a stand-in with opts over namespace ns until the test ends.
func start(t *testing.T, ns string, opts fluxstandin.Options) *fluxstandin.StandIn {
	t.Helper()
	if envErr != nil {
		t.Fatal(envErr)
	}
	skip := true
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:     scheme.New(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Controller: config.Controller{SkipNameValidation: &skip},
	})
	if err != nil {
		t.Fatal(err)
	}
	opts.SkipNameValidation = true
	s := fluxstandin.New(opts)
	if err := s.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("stand-in manager: %v", err)
		}
	})
	return s
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "standin-"}}
	if err := hub.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// gitSource creates a GitRepository serving revision (no artifact when revision is empty).
func gitSource(t *testing.T, ns, name, revision string) *sourcev1.GitRepository {
	t.Helper()
	ctx := context.Background()
	src := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       sourcev1.GitRepositorySpec{URL: "http://git.example/fleet.git", Interval: metav1.Duration{Duration: time.Hour}},
	}
	if err := hub.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	if revision != "" {
		setArtifact(t, src, revision)
	}
	return src
}

func setArtifact(t *testing.T, src *sourcev1.GitRepository, revision string) {
	t.Helper()
	src.Status.Artifact = &meta.Artifact{
		Path: "gitrepository/x.tar.gz", URL: "http://source-controller/x.tar.gz", Revision: revision,
		Digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000", LastUpdateTime: metav1.Now(),
	}
	if err := hub.Status().Update(context.Background(), src); err != nil {
		t.Fatal(err)
	}
}

// kustomization creates a tidegate-labelled Kustomization of cluster on source.
func kustomization(t *testing.T, ns, cluster, source string, interval time.Duration) *kustomizev1.Kustomization {
	t.Helper()
	ks := &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{Name: "web-" + cluster, Namespace: ns, Labels: map[string]string{
			v1alpha1.RolloutLabel: "web", v1alpha1.ClusterLabel: cluster, v1alpha1.WaveLabel: "canary",
		}},
		Spec: kustomizev1.KustomizationSpec{
			Interval:  metav1.Duration{Duration: interval},
			Timeout:   &metav1.Duration{Duration: 30 * time.Second},
			Path:      "./app",
			Prune:     true,
			Wait:      true,
			SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: source},
		},
	}
	if err := hub.Create(context.Background(), ks); err != nil {
		t.Fatal(err)
	}
	return ks
}

// readyState is what one status write said.
type readyState struct{ ready, healthy, reason, applied string }

func stateOf(ks *kustomizev1.Kustomization) readyState {
	s := readyState{ready: "-", healthy: "-", applied: ks.Status.LastAppliedRevision}
	if c := conditions.Get(ks, meta.ReadyCondition); c != nil {
		s.ready, s.reason = string(c.Status), c.Reason
	}
	if c := conditions.Get(ks, meta.HealthyCondition); c != nil {
		s.healthy = string(c.Status)
	}
	return s
}

// watchUntil records every state ks goes through until done says stop.
func watchUntil(t *testing.T, ks *kustomizev1.Kustomization, done func(*kustomizev1.Kustomization) bool) []readyState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := hub.Watch(ctx, &kustomizev1.KustomizationList{}, client.InNamespace(ks.Namespace),
		client.MatchingFields{"metadata.name": ks.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var seen []readyState
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: timed out; states seen: %v", ks.Name, seen)
		case ev := <-w.ResultChan():
			obj, ok := ev.Object.(*kustomizev1.Kustomization)
			if !ok {
				continue
			}
			if st := stateOf(obj); len(seen) == 0 || seen[len(seen)-1] != st {
				seen = append(seen, st)
			}
			if done(obj) {
				*ks = *obj
				return seen
			}
		}
	}
}

// isUnknown is true when the condition is there and Unknown (conditions.IsUnknown is also true when
// it is absent).
func isUnknown(ks *kustomizev1.Kustomization, typ string) bool {
	c := conditions.Get(ks, typ)
	return c != nil && c.Status == metav1.ConditionUnknown
}

func readyAt(revision string) func(*kustomizev1.Kustomization) bool {
	return func(ks *kustomizev1.Kustomization) bool {
		return conditions.IsTrue(ks, meta.ReadyCondition) && ks.Status.LastAppliedRevision == revision
	}
}

// A new Kustomization goes Ready Unknown and Healthy Unknown while it "applies", then Ready True at
// the revision its source serves, with what tidegate reads set as kustomize-controller sets it.
func TestAppliesTheSourcesRevision(t *testing.T) {
	ns := namespace(t)
	rev := "main@sha1:1111111111111111111111111111111111111111"
	gitSource(t, ns, "web-111111111111", rev)
	start(t, ns, fluxstandin.Options{
		Pace:      fluxstandin.Pace{ApplyLatency: 300 * time.Millisecond},
		NoRefresh: true,
		Inventory: func(*kustomizev1.Kustomization) []kustomizev1.ResourceRef {
			return []kustomizev1.ResourceRef{fluxstandin.WorkloadEntry("Deployment", "demo", "web")}
		},
	})
	ks := kustomization(t, ns, "c1", "web-111111111111", time.Hour)
	seen := watchUntil(t, ks, readyAt(rev))

	sawApplying := false
	for _, s := range seen {
		if s.ready == "Unknown" && s.healthy == "Unknown" && s.reason == meta.ProgressingReason {
			sawApplying = true
		}
	}
	if !sawApplying {
		t.Errorf("never saw Ready and Healthy Unknown (Progressing) while applying: %v", seen)
	}
	if ks.Status.ObservedGeneration != ks.Generation || ks.Status.LastAttemptedRevision != rev {
		t.Errorf("observedGeneration %d (generation %d), lastAttemptedRevision %q; want the generation and %s",
			ks.Status.ObservedGeneration, ks.Generation, ks.Status.LastAttemptedRevision, rev)
	}
	if !conditions.IsTrue(ks, meta.HealthyCondition) || conditions.Has(ks, meta.ReconcilingCondition) {
		t.Errorf("conditions %+v: want Healthy True and no Reconciling", ks.Status.Conditions)
	}
	if ks.Status.Inventory == nil || len(ks.Status.Inventory.Entries) != 1 || ks.Status.Inventory.Entries[0].ID != "demo_web_apps_Deployment" {
		t.Errorf("inventory %+v, want the Deployment demo/web", ks.Status.Inventory)
	}
	if !engine.Observe(ks).ReadyAt("web-111111111111", rev) {
		t.Errorf("tidegate does not read the Kustomization as Ready at %s: %+v", rev, engine.Observe(ks))
	}
	if len(ks.Finalizers) != 1 || ks.Finalizers[0] != kustomizev1.KustomizationFinalizer {
		t.Errorf("finalizers %v, want kustomize-controller's", ks.Finalizers)
	}
}

// A revision set to fail its health checks on one cluster fails there the way tidegate recognises
// (Ready False HealthCheckFailed for the current generation), and applies on the other.
func TestFailsHealthChecksOnChosenClusters(t *testing.T) {
	ns := namespace(t)
	rev := "main@sha1:2222222222222222222222222222222222222222"
	gitSource(t, ns, "web-222222222222", rev)
	s := start(t, ns, fluxstandin.Options{Pace: fluxstandin.Pace{ApplyLatency: 200 * time.Millisecond}, FailAfter: 500 * time.Millisecond, NoRefresh: true})
	s.FailHealthChecks("sha1:2222222222222222222222222222222222222222", "bad")
	bad := kustomization(t, ns, "bad", "web-222222222222", time.Hour)
	good := kustomization(t, ns, "good", "web-222222222222", time.Hour)

	watchUntil(t, bad, func(ks *kustomizev1.Kustomization) bool { return conditions.IsFalse(ks, meta.ReadyCondition) })
	watchUntil(t, good, readyAt(rev))
	if r := conditions.GetReason(bad, meta.ReadyCondition); r != meta.HealthCheckFailedReason || !conditions.IsFalse(bad, meta.HealthyCondition) {
		t.Errorf("failing cluster: conditions %+v, want Ready and Healthy False HealthCheckFailed", bad.Status.Conditions)
	}
	if bad.Status.LastAppliedRevision != "" || bad.Status.ObservedGeneration == bad.Generation || bad.Status.LastAttemptedRevision != rev {
		t.Errorf("failing cluster: lastApplied %q, observedGeneration %d of %d, lastAttempted %q; want nothing applied, the generation not observed, %s attempted",
			bad.Status.LastAppliedRevision, bad.Status.ObservedGeneration, bad.Generation, bad.Status.LastAttemptedRevision, rev)
	}
	if !engine.Observe(bad).FailedAt("web-222222222222", rev) {
		t.Errorf("tidegate does not read the failure as the revision's: %+v", engine.Observe(bad))
	}
	if st := s.Stats(); st.Failed < 1 || st.Applies < 1 {
		t.Errorf("stats %+v, want a failure and an apply", st)
	}
}

// Every spec.interval the Kustomization is reconciled again: Ready and Healthy turn Unknown at the
// same applied revision, then True again. tidegate reads it as still at the revision, not failed.
func TestReReconcilesEveryInterval(t *testing.T) {
	ns := namespace(t)
	rev := "main@sha1:3333333333333333333333333333333333333333"
	gitSource(t, ns, "web-333333333333", rev)
	s := start(t, ns, fluxstandin.Options{Pace: fluxstandin.Pace{ApplyLatency: 100 * time.Millisecond, RefreshLatency: 700 * time.Millisecond}, Jitter: -1})
	ks := kustomization(t, ns, "c1", "web-333333333333", time.Second)
	watchUntil(t, ks, readyAt(rev))

	sawUnknown := false
	seen := watchUntil(t, ks, func(ks *kustomizev1.Kustomization) bool {
		if isUnknown(ks, meta.ReadyCondition) {
			sawUnknown = true
			// status.history's latest snapshot says the last reconcile of this spec succeeded: tidegate
			// reads a member mid-reconcile by it, as it does kustomize-controller's.
			if o := engine.Observe(ks); !o.StillAt("web-333333333333", rev) || o.FailedAt("web-333333333333", rev) || !o.ReadyAt("web-333333333333", rev) {
				t.Errorf("mid-reconcile, tidegate reads %+v: want Ready at %s by its history, not failed", o, rev)
			}
		}
		return sawUnknown && readyAt(rev)(ks)
	})
	for _, st := range seen {
		if st.applied != rev {
			t.Errorf("the applied revision changed during a re-reconcile: %v", seen)
		}
	}
	if !sawUnknown {
		t.Errorf("no re-reconcile seen: %v", seen)
	}
	if st := s.Stats(); st.Refreshes < 1 {
		t.Errorf("stats %+v, want a refresh", st)
	}
}

// A new generation cuts a running health check short, as kustomize-controller's interrupt does, so a
// rollback does not wait out the failing revision's timeout.
func TestNewGenerationInterruptsHealthChecks(t *testing.T) {
	ns := namespace(t)
	bad, good := "main@sha1:4444444444444444444444444444444444444444", "main@sha1:5555555555555555555555555555555555555555"
	gitSource(t, ns, "web-444444444444", bad)
	gitSource(t, ns, "web-555555555555", good)
	s := start(t, ns, fluxstandin.Options{Pace: fluxstandin.Pace{ApplyLatency: 100 * time.Millisecond}, FailAfter: 10 * time.Minute, NoRefresh: true})
	s.FailHealthChecks(bad)
	ks := kustomization(t, ns, "c1", "web-444444444444", time.Hour)
	watchUntil(t, ks, func(ks *kustomizev1.Kustomization) bool { return isUnknown(ks, meta.HealthyCondition) })

	switchTo := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"sourceRef":{"name":"web-555555555555"}}}`))
	if err := hub.Patch(context.Background(), ks, switchTo); err != nil {
		t.Fatal(err)
	}
	watchUntil(t, ks, readyAt(good))
	if st := s.Stats(); st.Canceled != 1 {
		t.Errorf("stats %+v, want one canceled health check", st)
	}
}

// A source without an artifact leaves the Kustomization Ready False ArtifactFailed, retried until
// the artifact is there.
func TestWaitsForTheArtifact(t *testing.T) {
	ns := namespace(t)
	src := gitSource(t, ns, "web-666666666666", "")
	start(t, ns, fluxstandin.Options{Pace: fluxstandin.Pace{ApplyLatency: 100 * time.Millisecond}, RequeueDependency: 200 * time.Millisecond, NoRefresh: true})
	ks := kustomization(t, ns, "c1", "web-666666666666", time.Hour)
	watchUntil(t, ks, func(ks *kustomizev1.Kustomization) bool {
		return conditions.GetReason(ks, meta.ReadyCondition) == meta.ArtifactFailedReason
	})
	rev := fmt.Sprintf("main@sha1:%040d", 6)
	setArtifact(t, src, rev)
	watchUntil(t, ks, readyAt(rev))
}

// ReconcileAll re-reconciles every applied Kustomization now, without a new generation.
func TestReconcileAllReReconcilesNow(t *testing.T) {
	ns := namespace(t)
	rev := "main@sha1:7777777777777777777777777777777777777777"
	gitSource(t, ns, "web-777777777777", rev)
	s := start(t, ns, fluxstandin.Options{Pace: fluxstandin.Pace{ApplyLatency: 100 * time.Millisecond, RefreshLatency: 500 * time.Millisecond}, NoRefresh: true})
	ks := kustomization(t, ns, "c1", "web-777777777777", time.Hour)
	watchUntil(t, ks, readyAt(rev))
	gen := ks.Generation

	if n, err := s.ReconcileAll(context.Background(), ns); err != nil || n != 1 {
		t.Fatalf("ReconcileAll = %d, %v; want 1 Kustomization", n, err)
	}
	sawUnknown := false
	watchUntil(t, ks, func(ks *kustomizev1.Kustomization) bool {
		sawUnknown = sawUnknown || isUnknown(ks, meta.ReadyCondition)
		return sawUnknown && readyAt(rev)(ks)
	})
	// The second reconcile counts as a refresh unless the stand-in's cache had not seen the first
	// one's status yet; either way there were two, and no new generation.
	if st := s.Stats(); st.Refreshes+st.Applies != 2 || ks.Generation != gen {
		t.Errorf("stats %+v, generation %d (was %d): want two reconciles and the same generation", st, ks.Generation, gen)
	}
}

// While re-reconciles are paused an applied Kustomization is left alone; they resume on their own
// schedule, and new generations apply meanwhile.
func TestPauseRefresh(t *testing.T) {
	ns := namespace(t)
	rev := "main@sha1:8888888888888888888888888888888888888888"
	gitSource(t, ns, "web-888888888888", rev)
	s := start(t, ns, fluxstandin.Options{Pace: fluxstandin.Pace{ApplyLatency: 100 * time.Millisecond}, Jitter: -1})
	s.PauseRefresh(true)
	ks := kustomization(t, ns, "c1", "web-888888888888", time.Second)
	watchUntil(t, ks, readyAt(rev))
	time.Sleep(3 * time.Second)
	if st := s.Stats(); st.Refreshes != 0 || st.Applies != 1 {
		t.Fatalf("paused: stats %+v, want one apply and no refresh", st)
	}
	s.PauseRefresh(false)
	watchUntil(t, ks, func(*kustomizev1.Kustomization) bool { return s.Stats().Refreshes > 0 })
}
