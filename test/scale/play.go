package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/simulator"
)

// Install creates the rollout, which rolls out the first revision (v1) wave by wave: setup, with
// the waves soaking SetupSoak, and the stand-in at SetupPace without re-reconciles. Then the soak
// and the stand-in's pace are the measured ones, and its re-reconciles run.
func (h *Harness) Install(ctx context.Context) (*Release, error) {
	rel := &Release{Name: "install v1", Revision: h.versions["v1"]}
	if h.standIn != nil {
		h.standIn.PauseRefresh(true)
	}
	err := h.play(ctx, rel, func() error { return h.hub.Create(ctx, h.rollout()) }, nil)
	if h.standIn != nil {
		h.standIn.SetPace(h.cfg.StandIn.Pace)
		h.standIn.PauseRefresh(false)
	}
	if h.soak != h.cfg.Soak {
		h.soak = h.cfg.Soak
		if perr := h.patchSpec(ctx, map[string]any{"waves": h.waves(h.soak)}); perr != nil && err == nil {
			err = perr
		}
	}
	return rel, err
}

// Release commits version, a healthy revision, and rolls it out.
func (h *Harness) Release(ctx context.Context, version string) (*Release, error) {
	rel := &Release{Name: "release " + version}
	err := h.play(ctx, rel, func() error {
		rev, err := h.commit(version)
		rel.Revision = rev
		return err
	}, nil)
	return rel, err
}

// play starts a release with begin, runs during (if any) while it goes, waits for it to end
// (Completed or RolledBack at its revision) and measures it.
func (h *Harness) play(ctx context.Context, rel *Release, begin func() error, during func(context.Context) error) error {
	before, _ := h.metricsNow(ctx)
	cpu := h.cpuNow()
	rel.Start = time.Now()
	h.cfg.Logf("%s: started", rel.Name)
	if err := begin(); err != nil {
		return err
	}
	runCtx, cancel := context.WithTimeout(ctx, h.releaseTimeout())
	defer cancel()
	var err error
	if during != nil {
		err = during(runCtx)
	}
	final, werr := h.tl.wait(runCtx, rel.Name+" to end", func(r rolloutState) bool { return ended(r, rel.Revision) })
	rel.End = time.Now().Add(time.Second)
	rel.Outcome = final.status.Phase
	if werr != nil {
		rel.Outcome = "did not end within " + h.releaseTimeout().String()
		err = werr
	}
	if !h.restarted.IsZero() && h.restarted.After(rel.Start) {
		before = h.afterRestart
		rel.ReconcilesSince = h.restarted
	}
	after, _ := h.metricsNow(ctx)
	rel.Reconciles = reconciles(before, after)
	rel.CPU = h.cpuSince(cpu)
	if merr := h.measure(ctx, rel, final); merr != nil && err == nil {
		err = merr
	}
	h.cfg.Logf("%s: %s in %s", rel.Name, rel.Outcome, rel.End.Sub(rel.Start).Round(time.Second))
	return err
}

// ended tells whether the release of revision ended: Completed, RolledBack, or Held on a failed
// wave (a first rollout has nothing to roll back to).
func ended(r rolloutState, revision string) bool {
	c := r.status.Candidate
	if c == nil || c.Revision != revision {
		return false
	}
	switch r.status.Phase {
	case v1alpha1.PhaseCompleted, v1alpha1.PhaseRolledBack:
		return true
	case v1alpha1.PhaseHeld:
		return r.status.WaitingFor != nil && r.status.WaitingFor.Reason == v1alpha1.WaitingForFailedWave
	}
	return false
}

// releaseTimeout bounds one release: three soaks, twice the applies at the expected throughput
// (the forward ones and as many again: a rollback, Flux's re-reconciles), and three minutes.
func (h *Harness) releaseTimeout() time.Duration {
	perSecond := 2.0 // real kustomize-controller on this machine, roughly
	if h.standIn != nil {
		p := h.standIn.Pace()
		perSecond = float64(h.standIn.Workers()) / p.ApplyLatency.Seconds()
		if p.Rate > 0 {
			perSecond = min(perSecond, p.Rate)
		}
	}
	applies := time.Duration(2 * float64(h.cfg.Clusters) / perSecond * float64(time.Second))
	return 3*h.soak + applies + 3*time.Minute
}

// Idle is what the controller did over a window in which nothing changed but Flux's periodic
// re-reconciles.
type Idle struct {
	Window        time.Duration
	Hub, Members  Counts
	Writes        int
	Creates       int
	Reconciles    map[string]float64
	FluxRefreshes int64
	CPU           CPU
}

// Idle waits settle, then counts over window. With reconcileAll, the stand-in re-reconciles every
// Kustomization as the window starts, as Flux does every interval: what tidegate sees then are
// Flux's status writes and nothing else.
func (h *Harness) Idle(ctx context.Context, settle, window time.Duration, reconcileAll bool) (*Idle, error) {
	h.cfg.Logf("idle: %s", window)
	if err := sleep(ctx, settle); err != nil {
		return nil, err
	}
	before, err := h.metricsNow(ctx)
	if err != nil {
		return nil, err
	}
	cpu := h.cpuNow()
	var refreshes int64
	if h.standIn != nil {
		refreshes = h.standIn.Stats().Refreshes
	}
	start := time.Now()
	if reconcileAll && h.standIn != nil {
		if _, err := h.standIn.ReconcileAll(ctx, h.fleet.Namespace); err != nil {
			return nil, err
		}
	}
	if err := sleep(ctx, time.Until(start.Add(window))); err != nil {
		return nil, err
	}
	end := time.Now()
	after, err := h.metricsNow(ctx)
	if err != nil {
		return nil, err
	}
	if err := h.audit.sync(); err != nil {
		return nil, err
	}
	hub := h.audit.Hub(start, end)
	idle := &Idle{Window: end.Sub(start), Hub: countRequests(hub, nil), Members: countRequests(h.audit.Members(start, end), nil),
		Reconciles: reconciles(before, after), CPU: h.cpuSince(cpu)}
	for _, r := range hub {
		if r.Write() {
			idle.Writes++
		}
		if r.Verb == "create" {
			idle.Creates++
		}
	}
	if h.standIn != nil {
		idle.FluxRefreshes = h.standIn.Stats().Refreshes - refreshes
	}
	return idle, nil
}

// Failure is the release of a revision that fails its health checks on every cluster of one
// member, with a hold and a controller restart on the way.
type Failure struct {
	Release *Release
	// Failing are the clusters where the revision fails.
	Failing int
	// HoldSet is when spec.hold was set, while the canary soaked; Held when the status said so.
	HoldSet, Held time.Time
	// HoldReconciles are the reconciles of the rollout that began in between (the controller's
	// uncached reads of it in the hub's audit log), the one that wrote the hold included: 1 when
	// the first reconcile that read the hold stopped the rollout.
	HoldReconciles int
	// HeldFor is how long the hold stayed, well past the canary's soak, and SwitchedWhileHeld how
	// many clusters switched to the candidate meanwhile.
	HeldFor           time.Duration
	SwitchedWhileHeld int
	// Killed, Started and Ready time the restart: killed while held, the hold cleared while it was
	// down, started, informers synced. NextDecision is the first receipt or Kustomization write that
	// followed (from the hub's audit log), FirstReceipt the first receipt, FirstSwitch the ring's
	// first switch to the candidate.
	Killed, Started, Ready                  time.Time
	NextDecision, FirstReceipt, FirstSwitch time.Time
	// RollingBack and RolledBack are when the status first said so.
	RollingBack, RolledBack time.Time
	// Updated clusters switched to the candidate; Back switched back to the known-good after the
	// failure and BackReady were Ready there; LastBackReady is the last of them.
	Updated, Back, BackReady int
	LastBackReady            time.Time
	RollbackWrites           Writes
}

// FailWithHoldAndRestart plays Failure with version.
func (h *Harness) FailWithHoldAndRestart(ctx context.Context, version string) (*Failure, error) {
	fail := &Failure{}
	failMember := h.fleet.Members[len(h.fleet.Members)-1].Name
	var failing []string
	for _, c := range h.names[1:] { // never the canary, the first cluster by name
		if h.clusters[c] == failMember {
			failing = append(failing, c)
		}
	}
	fail.Failing = len(failing)
	rel := &Release{Name: fmt.Sprintf("release %s (fails on the %d clusters of %s)", version, len(failing), failMember)}
	fail.Release = rel
	var known rolloutState
	err := h.play(ctx, rel, func() error {
		rev, err := h.commit(version)
		rel.Revision = rev
		if h.standIn != nil {
			h.standIn.FailHealthChecks(rev, failing...)
		} else {
			h.sim.SetFault(failMember, simulator.Fault{Workload: workload, Mode: simulator.NeverAvailable, Image: ":" + version})
		}
		return err
	}, func(ctx context.Context) error {
		r, err := h.holdAndRestart(ctx, fail, rel.Revision)
		known = r
		return err
	})
	if h.standIn != nil {
		h.standIn.ClearFailures()
	} else {
		h.sim.ClearFault(failMember, workload)
	}
	h.measureRollback(fail, known)
	return fail, err
}

// holdAndRestart holds the rollout while its canary soaks, checks that nothing new starts, kills
// the controller, clears the hold and starts the controller again.
func (h *Harness) holdAndRestart(ctx context.Context, fail *Failure, revision string) (rolloutState, error) {
	soaking, err := h.tl.wait(ctx, "the canary to soak", func(r rolloutState) bool {
		return r.status.Candidate != nil && r.status.Candidate.Revision == revision &&
			len(r.status.Waves) > 0 && r.status.Waves[0].Phase == v1alpha1.WaveSoaking
	})
	if err != nil {
		return soaking, err
	}
	source := soaking.status.Candidate.Source
	fail.HoldSet = time.Now()
	h.cfg.Logf("hold: set while the canary soaks")
	if err := h.patchSpec(ctx, map[string]any{"hold": map[string]string{"reason": "scale bench: hold while the canary soaks"}}); err != nil {
		return soaking, err
	}
	held, err := h.tl.wait(ctx, "the hold to show", func(r rolloutState) bool {
		return r.hold && (r.status.WaitingFor != nil && r.status.WaitingFor.Reason == v1alpha1.WaitingForHold ||
			conditionTrue(r.status.Conditions, v1alpha1.HeldCondition))
	})
	if err != nil {
		return held, err
	}
	fail.Held = held.at
	if err := sleep(ctx, h.soak+15*time.Second); err != nil {
		return held, err
	}
	fail.HeldFor = time.Since(fail.HoldSet)
	for _, c := range h.names[1:] {
		if _, ok := h.tl.switchedAt(c, source, fail.HoldSet); ok {
			fail.SwitchedWhileHeld++
		}
	}

	h.cfg.Logf("restart: the controller is killed, the hold cleared, the controller started")
	fail.Killed = time.Now()
	h.ctl.kill()
	if err := h.patchSpec(ctx, map[string]any{"hold": nil}); err != nil {
		return held, err
	}
	if err := sleep(ctx, 2*time.Second); err != nil {
		return held, err
	}
	fail.Started = time.Now()
	if err := h.ctl.start(ctx); err != nil {
		return held, err
	}
	fail.Ready = time.Now()
	h.restarted = fail.Started
	h.afterRestart, _ = h.metricsNow(ctx)
	for fail.FirstSwitch.IsZero() {
		for _, c := range h.names[1:] {
			if t, ok := h.tl.switchedAt(c, source, fail.Started); ok && (fail.FirstSwitch.IsZero() || t.Before(fail.FirstSwitch)) {
				fail.FirstSwitch = t
			}
		}
		if latest, _ := h.tl.latest(); latest.status.Phase == v1alpha1.PhaseRolledBack || latest.status.Phase == v1alpha1.PhaseCompleted {
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return held, err
		}
	}
	return soaking, nil
}

// measureRollback finds, after the release ended, when it failed and which clusters went back.
func (h *Harness) measureRollback(fail *Failure, soaking rolloutState) {
	rel := fail.Release
	if rb, ok := h.tl.rolloutWhen(rel.Start, func(r rolloutState) bool { return r.status.Phase == v1alpha1.PhaseRollingBack }); ok {
		fail.RollingBack = rb.at
	}
	if rb, ok := h.tl.rolloutWhen(rel.Start, func(r rolloutState) bool {
		return r.status.Phase == v1alpha1.PhaseRolledBack && r.status.Candidate != nil && r.status.Candidate.Revision == rel.Revision
	}); ok {
		fail.RolledBack = rb.at
	}
	for _, r := range h.audit.Hub(fail.HoldSet, fail.Held) {
		if r.Verb == "get" && r.Resource == "fleetrollouts" && r.Name == RolloutName {
			fail.HoldReconciles++
		}
	}
	for _, g := range rel.Gates {
		if !fail.Started.IsZero() && !g.At.Before(fail.Started) {
			fail.FirstReceipt = g.At
			break
		}
	}
	if !fail.Started.IsZero() {
		for _, r := range h.audit.Hub(fail.Started, rel.End) {
			if r.Verb == "create" && r.Resource == "gatereceipts" || r.Resource == "kustomizations" && r.Write() {
				fail.NextDecision = r.At
				break
			}
		}
	}
	if soaking.status.Candidate == nil || soaking.status.LastKnownGood == nil || fail.RollingBack.IsZero() {
		return
	}
	source, kg := soaking.status.Candidate.Source, soaking.status.LastKnownGood
	for _, c := range h.names {
		if _, ok := h.tl.switchedAt(c, source, rel.Start); !ok {
			continue
		}
		fail.Updated++
		if t, ok := h.tl.switchedAt(c, kg.Source, fail.RollingBack.Add(-time.Second)); ok {
			fail.Back++
			if r, ok := h.tl.readyAt(c, kg.Source, kg.Revision, t); ok {
				fail.BackReady++
				if r.After(fail.LastBackReady) {
					fail.LastBackReady = r
				}
			}
		}
	}
	fail.RollbackWrites = h.kustomizationWrites(h.audit.Hub(fail.RollingBack.Add(-time.Second), rel.End))
}

// patchSpec merge-patches the rollout's spec, as `tidegate hold` or a Git commit would.
func (h *Harness) patchSpec(ctx context.Context, spec map[string]any) error {
	b, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return err
	}
	fr := &v1alpha1.FleetRollout{}
	fr.Name, fr.Namespace = RolloutName, h.fleet.Namespace
	return h.hub.Patch(ctx, fr, client.RawPatch(types.MergePatchType, b))
}

// Sizes are the largest objects the rollout left, as JSON.
type Sizes struct {
	Rollout, RolloutStatus int
	Receipt                int
	ReceiptName            string
	Receipts               int
}

// Sizes measures the rollout and its receipts.
func (h *Harness) Sizes(ctx context.Context) (Sizes, error) {
	var s Sizes
	fr := &v1alpha1.FleetRollout{}
	if err := h.hub.Get(ctx, types.NamespacedName{Namespace: h.fleet.Namespace, Name: RolloutName}, fr); err != nil {
		return s, err
	}
	b, _ := json.Marshal(fr)
	st, _ := json.Marshal(fr.Status)
	s.Rollout, s.RolloutStatus = len(b), len(st)
	var list v1alpha1.GateReceiptList
	if err := h.hub.List(ctx, &list, client.InNamespace(h.fleet.Namespace)); err != nil {
		return s, err
	}
	s.Receipts = len(list.Items)
	for i := range list.Items {
		b, _ := json.Marshal(&list.Items[i])
		if len(b) > s.Receipt {
			s.Receipt, s.ReceiptName = len(b), list.Items[i].Name
		}
	}
	return s, nil
}

// Resources are the controller's CPU and memory over the whole run.
type Resources struct {
	Usage Usage
	// Measured is false in-process.
	Measured bool
	// PeakHeap and PeakRSS are the largest go_memstats_heap_alloc_bytes and
	// process_resident_memory_bytes scraped (every 5 s).
	PeakHeap, PeakRSS float64
}

// Resources reads them.
func (h *Harness) Resources() Resources {
	u, ok := h.ctl.usage()
	h.scrapeMu.Lock()
	defer h.scrapeMu.Unlock()
	return Resources{Usage: u, Measured: ok, PeakHeap: h.peakHeap, PeakRSS: h.peakRSS}
}

func conditionTrue(cs []metav1.Condition, typ string) bool {
	for _, c := range cs {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// Bench plays every scenario on one fleet: the first install, a healthy release (v2), an idle
// window, a release (v3) that is held, survives a controller restart and fails a wave, a release
// (v4) whose last wave waits three minutes on one cluster that does not answer, then reads the
// sizes and the controller's resources. What fails is recorded and the rest still runs.
func Bench(ctx context.Context, cfg Config, idle time.Duration) *Run {
	cfg.defaults()
	r := &Run{Config: cfg}
	begin := time.Now()
	defer func() { r.Wall = time.Since(begin) }()
	note := func(what string, err error) {
		if err != nil {
			r.Errors = append(r.Errors, what+": "+err.Error())
			cfg.Logf("%s: %v", what, err)
		}
	}
	h, err := Start(ctx, cfg)
	if err != nil {
		note("starting the bench", err)
		return r
	}
	defer h.Stop()
	r.Started = time.Since(begin)
	rel, err := h.Install(ctx)
	r.Releases = append(r.Releases, rel)
	note(rel.Name, err)
	rel, err = h.Release(ctx, "v2")
	r.Releases = append(r.Releases, rel)
	note(rel.Name, err)
	r.Idle, err = h.Idle(ctx, 10*time.Second, idle, false)
	note("idle", err)
	r.Failure, err = h.FailWithHoldAndRestart(ctx, "v3")
	if r.Failure != nil && r.Failure.Release != nil {
		r.Releases = append(r.Releases, r.Failure.Release)
	}
	note("release v3", err)
	r.Away, err = h.ReleaseWithOneAway(ctx, "v4", 3*time.Minute)
	if r.Away != nil && r.Away.Release != nil {
		r.Releases = append(r.Releases, r.Away.Release)
	}
	note("release v4 with one cluster away", err)
	sizes, err := h.Sizes(ctx)
	if err == nil {
		r.Sizes = &sizes
	}
	note("sizes", err)
	r.Res = h.Resources()
	return r
}
