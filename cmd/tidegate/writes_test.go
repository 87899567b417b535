package main

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/ops"
)

// writesNS holds the rollouts the write tests change; each test deletes its own.
const writesNS = "writes"

// newRollout creates a rollout in writesNS with a status as the controller writes it, lets edit
// change it first, and returns it as read back.
func newRollout(ctx context.Context, t *testing.T, name string, edit func(*v1alpha1.FleetRollout)) *v1alpha1.FleetRollout {
	t.Helper()
	if err := namespace(ctx, writesNS); err != nil {
		t.Fatal(err)
	}
	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: writesNS},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet-repo"},
			Waves: []v1alpha1.Wave{
				{Name: "canary", Count: new(int32(1))},
				{Name: "everyone", Selector: &metav1.LabelSelector{}, RequireApproval: true},
			},
			Approvals: []v1alpha1.Approval{{Revision: webKnownGood.Revision, By: "carol"}},
		},
		Status: v1alpha1.FleetRolloutStatus{
			ObservedGeneration: 1,
			Phase:              v1alpha1.PhaseProgressing,
			CurrentWave:        "everyone",
			Candidate:          webCandidate,
			LastKnownGood:      webKnownGood,
			Conditions: []metav1.Condition{
				cond(v1alpha1.ReadyCondition, metav1.ConditionUnknown, v1alpha1.AwaitingApprovalReason, "wave everyone needs an approval", at(5, 0)),
			},
			Waves: []v1alpha1.WaveStatus{
				{Name: "canary", Phase: v1alpha1.WaveSucceeded, Clusters: []string{"eu-1"}, Updated: 1, Healthy: 1, StartedAt: atp(0, 3), ReadyAt: atp(0, 41), FinishedAt: atp(5, 0)},
				{Name: "everyone", Phase: v1alpha1.WaveAwaiting},
			},
		},
	}
	if edit != nil {
		edit(fr)
	}
	if err := createWithStatus(ctx, fr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), fr) })
	return get(ctx, t, name)
}

func get(ctx context.Context, t *testing.T, name string) *v1alpha1.FleetRollout {
	t.Helper()
	fr := &v1alpha1.FleetRollout{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: writesNS, Name: name}, fr); err != nil {
		t.Fatal(err)
	}
	return fr
}

// expectRun checks the exit code and what the command printed.
func expectRun(t *testing.T, r cliResult, code int, stdout, stderr string) {
	t.Helper()
	if r.code != code || r.stdout != stdout || r.stderr != stderr {
		t.Errorf("exit %d, want %d\nstdout:\n%q\nwant:\n%q\nstderr:\n%q\nwant:\n%q", r.code, code, r.stdout, stdout, r.stderr, stderr)
	}
}

// expectWritten reads the rollout back and checks that its spec is before's changed by change, its
// annotations before's changed by annotate, and its status untouched; and that the command line
// wrote it with its own field manager, which then owns what it set.
func expectWritten(ctx context.Context, t *testing.T, before *v1alpha1.FleetRollout, change func(*v1alpha1.FleetRolloutSpec), annotate func(map[string]string)) *v1alpha1.FleetRollout {
	t.Helper()
	after := expectChanged(ctx, t, before, change, annotate)
	if !managedBy(after, cliFieldManager) {
		t.Errorf("no managedFields entry of %q: %+v", cliFieldManager, after.ManagedFields)
	}
	return after
}

// expectCleared is expectWritten for a change that only removes fields: no manager owns them then.
func expectCleared(ctx context.Context, t *testing.T, before *v1alpha1.FleetRollout, change func(*v1alpha1.FleetRolloutSpec)) *v1alpha1.FleetRollout {
	t.Helper()
	after := expectChanged(ctx, t, before, change, nil)
	if after.Generation == before.Generation {
		t.Errorf("the spec was not written (generation %d)", after.Generation)
	}
	return after
}

func expectChanged(ctx context.Context, t *testing.T, before *v1alpha1.FleetRollout, change func(*v1alpha1.FleetRolloutSpec), annotate func(map[string]string)) *v1alpha1.FleetRollout {
	t.Helper()
	after := get(ctx, t, before.Name)
	wantSpec := before.Spec.DeepCopy()
	if change != nil {
		change(wantSpec)
	}
	if !equality.Semantic.DeepEqual(*wantSpec, after.Spec) {
		t.Errorf("spec (want, got):\n%s", diff(*wantSpec, after.Spec))
	}
	wantAnn := map[string]string{}
	for k, v := range before.Annotations {
		wantAnn[k] = v
	}
	if annotate != nil {
		annotate(wantAnn)
	}
	gotAnn := after.Annotations
	if gotAnn == nil {
		gotAnn = map[string]string{}
	}
	if !equality.Semantic.DeepEqual(wantAnn, gotAnn) {
		t.Errorf("annotations (want, got):\n%s", diff(wantAnn, gotAnn))
	}
	if !equality.Semantic.DeepEqual(before.Status, after.Status) {
		t.Errorf("status changed (before, after):\n%s", diff(before.Status, after.Status))
	}
	return after
}

func managedBy(fr *v1alpha1.FleetRollout, manager string) bool {
	for _, m := range fr.ManagedFields {
		if m.Manager == manager && m.Subresource == "" {
			return true
		}
	}
	return false
}

func expectUnchanged(ctx context.Context, t *testing.T, before *v1alpha1.FleetRollout) {
	t.Helper()
	if after := get(ctx, t, before.Name); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the rollout was written (resourceVersion %s, was %s)", after.ResourceVersion, before.ResourceVersion)
	}
}

func TestHoldSuspendResume(t *testing.T) {
	ctx := hub(t)
	fr := newRollout(ctx, t, "hold", nil)
	const prefix = "fleetrollout writes/hold: "

	r := tidegate(ctx, "-n", writesNS, "hold", "hold", "--reason", "change freeze")
	expectRun(t, r, exitOK, prefix+"spec.hold set (reason: change freeze)\n", "")
	fr = expectWritten(ctx, t, fr, func(s *v1alpha1.FleetRolloutSpec) { s.Hold = &v1alpha1.Hold{Reason: "change freeze"} }, nil)

	r = tidegate(ctx, "-n", writesNS, "hold", "hold", "--reason", "change freeze")
	expectRun(t, r, exitOK, prefix+"spec.hold already set (reason: change freeze); nothing changed\n", "")
	expectUnchanged(ctx, t, fr)

	r = tidegate(ctx, "-n", writesNS, "hold", "hold", "--reason", "incident 42")
	expectRun(t, r, exitOK, prefix+"spec.hold set (reason: incident 42; was: change freeze)\n", "")
	fr = expectWritten(ctx, t, fr, func(s *v1alpha1.FleetRolloutSpec) { s.Hold.Reason = "incident 42" }, nil)

	r = tidegate(ctx, "-n", writesNS, "hold", "hold")
	expectRun(t, r, exitUsage, "", "error: --reason is required: it tells whoever resumes the rollout why it was held\n")
	expectUnchanged(ctx, t, fr)

	r = tidegate(ctx, "-n", writesNS, "suspend", "hold")
	expectRun(t, r, exitOK, prefix+"spec.suspend set to true\n", "")
	fr = expectWritten(ctx, t, fr, func(s *v1alpha1.FleetRolloutSpec) { s.Suspend = true }, nil)

	r = tidegate(ctx, "-n", writesNS, "suspend", "hold")
	expectRun(t, r, exitOK, prefix+"spec.suspend already true; nothing changed\n", "")
	expectUnchanged(ctx, t, fr)

	r = tidegate(ctx, "-n", writesNS, "resume", "hold")
	expectRun(t, r, exitOK, prefix+"spec.hold cleared (was: incident 42), spec.suspend cleared\n", "")
	fr = expectCleared(ctx, t, fr, func(s *v1alpha1.FleetRolloutSpec) { s.Hold, s.Suspend = nil, false })

	r = tidegate(ctx, "-n", writesNS, "resume", "hold")
	expectRun(t, r, exitOK, prefix+"neither spec.hold nor spec.suspend is set; nothing changed\n", "")
	expectUnchanged(ctx, t, fr)

	r = tidegate(ctx, "-n", writesNS, "suspend", "hold")
	expectRun(t, r, exitOK, prefix+"spec.suspend set to true\n", "")
	fr = expectWritten(ctx, t, fr, func(s *v1alpha1.FleetRolloutSpec) { s.Suspend = true }, nil)
	r = tidegate(ctx, "-n", writesNS, "resume", "hold")
	expectRun(t, r, exitOK, prefix+"spec.suspend cleared\n", "")
	expectCleared(ctx, t, fr, func(s *v1alpha1.FleetRolloutSpec) { s.Suspend = false })

	// Held without spec.hold: resume changes nothing and says what would, by Held's reason.
	for _, tc := range []struct{ name, reason, message, want string }{
		{"held-failed", v1alpha1.GateFailedReason, "gate noDisruption failed: wave canary", " (the rollout is Held because a wave failed: see tidegate retry and tidegate rollback)"},
		{"held-invalid", v1alpha1.InvalidWaveReason, `wave canary does not start, and nothing of it is applied: wave "gpu": spec.waves[1]: the wave has no clusters`,
			` (the rollout is Held because a wave could not be judged; change what this names: wave canary does not start, and nothing of it is applied: wave "gpu": spec.waves[1]: the wave has no clusters)`},
		{"held-unreached", v1alpha1.HeldReason, "every wave of R passed or was skipped, but no cluster is Ready at it",
			" (the rollout is Held: every wave of R passed or was skipped, but no cluster is Ready at it)"},
	} {
		held := newRollout(ctx, t, tc.name, func(fr *v1alpha1.FleetRollout) {
			fr.Status.Phase = v1alpha1.PhaseHeld
			fr.Status.Conditions = append(fr.Status.Conditions, cond(v1alpha1.HeldCondition, metav1.ConditionTrue, tc.reason, tc.message, at(5, 0)))
		})
		r = tidegate(ctx, "-n", writesNS, "resume", tc.name)
		expectRun(t, r, exitOK, "fleetrollout writes/"+tc.name+": neither spec.hold nor spec.suspend is set; nothing changed"+tc.want+"\n", "")
		expectUnchanged(ctx, t, held)
	}

	for _, args := range [][]string{
		{"hold", "nope", "--reason", "x"}, {"resume", "nope"}, {"suspend", "nope"}, {"rollback", "nope"},
		{"retry", "nope"}, {"reconcile", "nope"}, {"approve", "nope", "--revision", "x"},
	} {
		r = tidegate(ctx, append([]string{"-n", writesNS}, args...)...)
		expectRun(t, r, exitUsage, "", "error: fleetrollout writes/nope not found\n")
	}
	r = tidegate(ctx, "--context", "nobody", "-n", writesNS, "hold", "hold", "--reason", "x")
	if r.code != exitUsage || !strings.Contains(r.stderr, `forbidden: User "nobody" cannot get resource "fleetrollouts"`) {
		t.Errorf("as nobody: exit %d, stderr %q", r.code, r.stderr)
	}
	r = tidegate(ctx, "-n", writesNS, "hold")
	expectRun(t, r, exitUsage, "", "error: accepts 1 arg(s), received 0; usage: tidegate hold ROLLOUT --reason REASON [flags]\n")
}

func TestApprove(t *testing.T) {
	ctx := hub(t)
	fr := newRollout(ctx, t, "approve", nil)
	const prefix = "fleetrollout writes/approve: "
	cand := webCandidate.Revision

	r := tidegate(ctx, "-n", writesNS, "approve", "approve", "--wave", "everyone")
	expectRun(t, r, exitUsage, "", "error: --revision is required, as status.candidate.revision shows it (the candidate of fleetrollout writes/approve is "+cand+")\n")
	expectUnchanged(ctx, t, fr)

	r = tidegate(ctx, "-n", writesNS, "approve", "approve", "--revision", cand, "--wave", "everyone", "--by", "alice", "--reason", "canary looked fine")
	expectRun(t, r, exitOK, prefix+`spec.approvals += {revision: `+cand+`, wave: everyone, by: alice, authenticatedAs: fleet-admin, reason: "canary looked fine"}`+"\n", "")
	// The approval records --by and, beside it, the user the API server authenticated the CLI as.
	alice := v1alpha1.Approval{Revision: cand, Wave: "everyone", By: "alice", AuthenticatedAs: "fleet-admin", Reason: "canary looked fine"}
	fr = expectWritten(ctx, t, fr, func(s *v1alpha1.FleetRolloutSpec) { s.Approvals = append(s.Approvals, givenAt(ctx, t, fr, alice)) }, nil)

	r = tidegate(ctx, "-n", writesNS, "approve", "approve", "--revision", cand, "--wave", "everyone", "--by", "alice", "--reason", "canary looked fine")
	expectRun(t, r, exitOK, prefix+`spec.approvals already has {revision: `+cand+`, wave: everyone, by: alice, authenticatedAs: fleet-admin, reason: "canary looked fine"}; nothing changed`+"\n", "")
	expectUnchanged(ctx, t, fr)

	short := v1alpha1.ShortRevision(cand)
	r = tidegate(ctx, "-n", writesNS, "approve", "approve", "--revision", short, "--irreversible", "--by", "bob")
	expectRun(t, r, exitOK, prefix+"spec.approvals += {revision: "+cand+", irreversible: true, by: bob, authenticatedAs: fleet-admin}\n", short+" expanded to the candidate "+cand+"\n")
	bob := v1alpha1.Approval{Revision: cand, Irreversible: true, By: "bob", AuthenticatedAs: "fleet-admin"}
	fr = expectWritten(ctx, t, fr, func(s *v1alpha1.FleetRolloutSpec) { s.Approvals = append(s.Approvals, givenAt(ctx, t, fr, bob)) }, nil)

	// The first characters of the candidate's digest expand to its revision too, with or without sha256:.
	digest := fr.Status.Candidate.Digest
	if digest == "" {
		t.Fatalf("the fixture's candidate has no digest: %+v", fr.Status.Candidate)
	}
	carol := v1alpha1.Approval{Revision: cand, Wave: "canary", By: "carol", AuthenticatedAs: "fleet-admin"}
	r = tidegate(ctx, "-n", writesNS, "approve", "approve", "--revision", digest[:len("sha256:")+12], "--wave", "canary", "--by", "carol")
	expectRun(t, r, exitOK, prefix+"spec.approvals += "+ops.ApprovalString(carol)+"\n", digest[:len("sha256:")+12]+" expanded to the candidate "+cand+"\n")
	fr = expectWritten(ctx, t, fr, func(s *v1alpha1.FleetRolloutSpec) { s.Approvals = append(s.Approvals, givenAt(ctx, t, fr, carol)) }, nil)
	bare := strings.TrimPrefix(digest, "sha256:")[:7]
	r = tidegate(ctx, "-n", writesNS, "approve", "approve", "--revision", bare, "--wave", "canary", "--by", "carol")
	expectRun(t, r, exitOK, prefix+"spec.approvals already has "+ops.ApprovalString(carol)+"; nothing changed\n", bare+" expanded to the candidate "+cand+"\n")
	expectUnchanged(ctx, t, fr)

	r = tidegate(ctx, "-n", writesNS, "approve", "approve", "--revision", cand, "--wave", "ring-9")
	expectRun(t, r, exitUsage, "", `error: fleetrollout writes/approve has no wave "ring-9"; its waves are canary, everyone`+"\n")
	expectUnchanged(ctx, t, fr)

	// A revision that is not the candidate is approved ahead of time, with a warning.
	next := "main@sha1:" + commit("web v2.5.0")
	r = tidegate(ctx, "-n", writesNS, "approve", "approve", "--revision", next)
	expectRun(t, r, exitOK, prefix+"spec.approvals += {revision: "+next+", authenticatedAs: fleet-admin}\n", "warning: "+next+" is not the candidate ("+cand+"): the approval applies only once it is\n")
	expectWritten(ctx, t, fr, func(s *v1alpha1.FleetRolloutSpec) {
		s.Approvals = append(s.Approvals, givenAt(ctx, t, fr, v1alpha1.Approval{Revision: next, AuthenticatedAs: "fleet-admin"}))
	}, nil)
}

// givenAt is a, as the CLI just appended it to fr's approvals: with the time it was given
// (approvedAt), which the CLI sets and the test cannot know.
func givenAt(ctx context.Context, t *testing.T, fr *v1alpha1.FleetRollout, a v1alpha1.Approval) v1alpha1.Approval {
	t.Helper()
	list := get(ctx, t, fr.Name).Spec.Approvals
	if len(list) == 0 || list[len(list)-1].ApprovedAt == nil {
		t.Errorf("the approval just written has no approvedAt: %+v", list)
		return a
	}
	a.ApprovedAt = list[len(list)-1].ApprovedAt
	return a
}

func TestRollbackRetry(t *testing.T) {
	ctx := hub(t)
	fr := newRollout(ctx, t, "rollback", nil)
	const prefix = "fleetrollout writes/rollback: "
	now := fixedNow.Format(time.RFC3339)

	r := tidegate(ctx, "-n", writesNS, "rollback", "rollback")
	expectRun(t, r, exitOK, prefix+"spec.rollback.request set to "+now+" (back from "+webCandidate.Revision+" to "+webKnownGood.Revision+")\n", "")
	fr = expectWritten(ctx, t, fr, func(s *v1alpha1.FleetRolloutSpec) { s.Rollback.Request = now }, nil)

	// The same clock again: the request still gets a new value, or the controller would not act.
	r = tidegate(ctx, "-n", writesNS, "rollback", "rollback")
	expectRun(t, r, exitOK, prefix+"spec.rollback.request set to "+now+"-1 (back from "+webCandidate.Revision+" to "+webKnownGood.Revision+")\n", "")
	fr = expectWritten(ctx, t, fr, func(s *v1alpha1.FleetRolloutSpec) { s.Rollback.Request = now + "-1" }, nil)

	r = tidegate(ctx, "-n", writesNS, "retry", "rollback")
	expectRun(t, r, exitOK, prefix+"spec.retry set to "+now+"\n", "warning: the rollout is Progressing; a retry acts only on a Held or RolledBack rollout, or a Completed one that rejected a revision\n")
	expectWritten(ctx, t, fr, func(s *v1alpha1.FleetRolloutSpec) { s.Retry = now }, nil)

	first := newRollout(ctx, t, "first", func(fr *v1alpha1.FleetRollout) {
		fr.Status.LastKnownGood = nil
		fr.Status.Phase = v1alpha1.PhaseRolledBack
	})
	r = tidegate(ctx, "-n", writesNS, "rollback", "first")
	expectRun(t, r, exitOK, "fleetrollout writes/first: spec.rollback.request set to "+now+"\n",
		"warning: there is no known-good revision to go back to; the controller will refuse the request\n")
	first = expectWritten(ctx, t, first, func(s *v1alpha1.FleetRolloutSpec) { s.Rollback.Request = now }, nil)
	r = tidegate(ctx, "-n", writesNS, "retry", "first")
	expectRun(t, r, exitOK, "fleetrollout writes/first: spec.retry set to "+now+"\n", "")
	expectWritten(ctx, t, first, func(s *v1alpha1.FleetRolloutSpec) { s.Retry = now }, nil)

	// Completed: the way back is the previous known-good of status.history, when there is one.
	done := newRollout(ctx, t, "done", func(fr *v1alpha1.FleetRollout) {
		fr.Status.Phase, fr.Status.Candidate, fr.Status.LastKnownGood = v1alpha1.PhaseCompleted, webKnownGood, webKnownGood
		fr.Status.History = []v1alpha1.HistoryEntry{{RevisionStatus: *webKnownGood, CompletedAt: atp(9, 0)}, {RevisionStatus: *webOlder, CompletedAt: atp(1, 0)}}
	})
	r = tidegate(ctx, "-n", writesNS, "rollback", "done")
	expectRun(t, r, exitOK, "fleetrollout writes/done: spec.rollback.request set to "+now+" (back from "+webKnownGood.Revision+" to the previous known-good "+
		webOlder.Revision+", through the gates wave by wave)\n", "")
	expectWritten(ctx, t, done, func(s *v1alpha1.FleetRolloutSpec) { s.Rollback.Request = now }, nil)
	alone := newRollout(ctx, t, "alone", func(fr *v1alpha1.FleetRollout) {
		fr.Status.Phase, fr.Status.Candidate, fr.Status.LastKnownGood = v1alpha1.PhaseCompleted, webKnownGood, webKnownGood
		fr.Status.History = []v1alpha1.HistoryEntry{{RevisionStatus: *webKnownGood}}
	})
	r = tidegate(ctx, "-n", writesNS, "rollback", "alone")
	expectRun(t, r, exitOK, "fleetrollout writes/alone: spec.rollback.request set to "+now+"\n",
		"warning: status.history holds no known-good revision before "+webKnownGood.Revision+"; the controller will refuse the request\n")
	expectWritten(ctx, t, alone, func(s *v1alpha1.FleetRolloutSpec) { s.Rollback.Request = now }, nil)
}

// playController plays the controller for the rollouts named: it handles each reconcile request by
// recording it in status.lastHandledReconcileAt, with Ready set to ready, until ctx ends.
func playController(ctx context.Context, t *testing.T, ready map[string]metav1.ConditionStatus) *sync.WaitGroup {
	return playing(ctx, t, func(fr *v1alpha1.FleetRollout) bool {
		status, ok := ready[fr.Name]
		v, requested := meta.ReconcileAnnotationValue(fr.Annotations)
		if !ok || !requested || v == fr.Status.LastHandledReconcileAt {
			return false
		}
		fr.Status.SetLastHandledReconcileRequest(v)
		fr.Status.Conditions = []metav1.Condition{cond(v1alpha1.ReadyCondition, status, v1alpha1.GateFailedReason, "wave everyone is blocked", at(10, 0))}
		return true
	})
}

// playing plays the controller until ctx ends: every 20ms, each rollout of writesNS that step
// changes has its status written.
func playing(ctx context.Context, t *testing.T, step func(fr *v1alpha1.FleetRollout) bool) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			var list v1alpha1.FleetRolloutList
			if err := k8s.List(ctx, &list, client.InNamespace(writesNS)); err == nil {
				for i := range list.Items {
					if fr := &list.Items[i]; step(fr) {
						if err := k8s.Status().Update(ctx, fr); err != nil && ctx.Err() == nil {
							t.Logf("playing the controller: %v", err)
						}
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	return &wg
}

func TestReconcile(t *testing.T) {
	ctx := hub(t)
	ok := newRollout(ctx, t, "reconcile-ok", nil)
	notReady := newRollout(ctx, t, "reconcile-not-ready", nil)
	ignored := newRollout(ctx, t, "reconcile-ignored", nil)
	suspended := newRollout(ctx, t, "reconcile-suspended", func(fr *v1alpha1.FleetRollout) { fr.Spec.Suspend = true })
	pctx, stop := context.WithCancel(ctx)
	wg := playController(pctx, t, map[string]metav1.ConditionStatus{
		ok.Name: metav1.ConditionUnknown, notReady.Name: metav1.ConditionFalse,
	})
	defer func() { stop(); wg.Wait() }()

	value := fixedNow.Format(time.RFC3339Nano)
	annotated := func(a map[string]string) { a[meta.ReconcileRequestAnnotation] = value }

	r := tidegate(ctx, "-n", writesNS, "reconcile", ok.Name)
	expectRun(t, r, exitOK, "fleetrollout writes/reconcile-ok: annotation reconcile.fluxcd.io/requestedAt set to "+value+"\n"+
		"fleetrollout writes/reconcile-ok: reconciled: phase Progressing, Ready Unknown (GateFailed): wave everyone is blocked\n", "")
	after := get(ctx, t, ok.Name)
	if after.Status.LastHandledReconcileAt != value || after.Annotations[meta.ReconcileRequestAnnotation] != value {
		t.Errorf("annotation %q, lastHandledReconcileAt %q, want both %q", after.Annotations[meta.ReconcileRequestAnnotation], after.Status.LastHandledReconcileAt, value)
	}
	if !equality.Semantic.DeepEqual(ok.Spec, after.Spec) {
		t.Errorf("spec changed (before, after):\n%s", diff(ok.Spec, after.Spec))
	}

	r = tidegate(ctx, "-n", writesNS, "reconcile", notReady.Name)
	expectRun(t, r, exitNo, "fleetrollout writes/reconcile-not-ready: annotation reconcile.fluxcd.io/requestedAt set to "+value+"\n"+
		"fleetrollout writes/reconcile-not-ready: reconciled: phase Progressing, Ready False (GateFailed): wave everyone is blocked\n", "")

	r = tidegate(ctx, "-n", writesNS, "reconcile", ignored.Name, "--timeout", "300ms")
	expectRun(t, r, exitNo, "fleetrollout writes/reconcile-ignored: annotation reconcile.fluxcd.io/requestedAt set to "+value+"\n",
		`error: timed out after 300ms waiting for fleetrollout writes/reconcile-ignored to handle the reconcile request `+value+` (status.lastHandledReconcileAt is ""): is tidegate-controller running?`+"\n")
	expectWritten(ctx, t, ignored, nil, annotated)

	r = tidegate(ctx, "-n", writesNS, "reconcile", suspended.Name)
	expectRun(t, r, exitUsage, "", "error: fleetrollout writes/reconcile-suspended is suspended: the controller writes nothing for it; resume it first (tidegate resume reconcile-suspended)\n")
	expectUnchanged(ctx, t, suspended)
}

// firstWrite is a writer safe for a reader in another goroutine, which tells when it was first written.
type firstWrite struct {
	mu      sync.Mutex
	b       strings.Builder
	written chan struct{}
	once    sync.Once
}

func newFirstWrite() *firstWrite { return &firstWrite{written: make(chan struct{})} }

func (w *firstWrite) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	defer w.once.Do(func() { close(w.written) })
	return w.b.Write(p)
}

func (w *firstWrite) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func TestStatusWatch(t *testing.T) {
	ctx := hub(t)
	fr := newRollout(ctx, t, "watch", nil)
	e := &cliEnv{now: func() time.Time { return fixedNow }, pollInterval: 50 * time.Millisecond}

	// The rollout completes while it is watched: it is shown again, and the watch ends with 0.
	out, errOut := newFirstWrite(), newFirstWrite()
	done := make(chan int)
	go func() {
		done <- runContext(ctx, e, []string{"--kubeconfig", kubeconfig, "-n", writesNS, "status", "watch", "--watch"}, strings.NewReader(""), out, errOut)
	}()
	select {
	case <-out.written:
	case <-time.After(30 * time.Second):
		t.Fatal("status --watch showed nothing")
	}
	fr.Status.Phase, fr.Status.CurrentWave = v1alpha1.PhaseCompleted, ""
	fr.Status.Waves[1].Phase = v1alpha1.WaveSucceeded
	fr.Status.Conditions = []metav1.Condition{cond(v1alpha1.ReadyCondition, metav1.ConditionTrue, v1alpha1.SucceededReason, "revision R runs on 2 clusters", at(10, 0))}
	if err := k8s.Status().Update(ctx, fr); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("exit %d, want 0; stderr %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("status --watch did not end when the rollout completed")
	}
	got := out.String()
	if n := strings.Count(got, "fleetrollout writes/watch\n"); n != 2 {
		t.Errorf("the rollout was shown %d times, want 2 (before and after it completed):\n%s", n, got)
	}
	if first := got[:strings.LastIndex(got, "fleetrollout writes/watch")]; !strings.Contains(first, "phase:       Progressing (wave everyone)\n") {
		t.Errorf("the first status shown is not the one in progress:\n%s", first)
	}
	if last := got[strings.LastIndex(got, "fleetrollout writes/watch"):]; !strings.Contains(last, "phase:       Completed\n") || !strings.Contains(last, "ready:       True (Succeeded)") {
		t.Errorf("the last status shown is not the completed one:\n%s", last)
	}

	// Interrupted: the exit code is that of the last status shown, 1 for a rollout not Ready.
	held := newRollout(ctx, t, "watch-held", func(fr *v1alpha1.FleetRollout) {
		fr.Status.Phase = v1alpha1.PhaseHeld
		fr.Status.Conditions = []metav1.Condition{cond(v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.HeldReason, "held: incident", at(9, 0))}
	})
	wctx, interrupt := context.WithCancel(ctx)
	out = newFirstWrite()
	go func() {
		done <- runContext(wctx, e, []string{"--kubeconfig", kubeconfig, "-n", writesNS, "status", held.Name, "-w"}, strings.NewReader(""), out, errOut)
	}()
	<-out.written
	interrupt()
	if code := <-done; code != exitNo {
		t.Errorf("interrupted watch of a held rollout: exit %d, want 1", code)
	}
}

// TestReceiptDigestAnnotation checks that receipts verify reads the content digest where the
// controller writes it: a receipt the controller builds (controllers.BuildReceipt) verifies, each
// check a match, and the same receipt without the annotation the controller wrote does not.
func TestReceiptDigestAnnotation(t *testing.T) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	fr.Status.Candidate = revision("web", "web v2")
	d := controllers.GateDecision{Result: v1alpha1.ResultPass, Evidence: map[string]any{"targets": []string{"eu-1"}}, PolicyDigest: "builtin:" + digest("policy")}
	ro, err := controllers.BuildReceipt(fr, &v1alpha1.WaveStatus{Name: "canary"}, []string{"eu-1"}, v1alpha1.GateNoDisruption, d, nil, at(9, 1))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := ro.Spec.StoredEvidence(nil)
	if err != nil {
		t.Fatal(err)
	}
	v := verifyReceipt(ro.GateReceipt, storedEvidence{raw: raw})
	if !v.Verified || len(v.Checks) != 3 {
		t.Fatalf("the receipt the controller built: %+v; want three matches", v)
	}
	for _, ch := range v.Checks {
		if ch.Result != checkMatch {
			t.Errorf("the receipt the controller built: %+v", ch)
		}
	}
	delete(ro.Annotations, controllers.ReceiptDigestAnnotation)
	v = verifyReceipt(ro.GateReceipt, storedEvidence{raw: raw})
	if ch := v.Checks[0]; v.Verified || ch.Check != "content-digest" || ch.Result != checkMismatch || !strings.HasPrefix(ch.Detail, "no "+v1alpha1.ContentDigestAnnotation+" annotation") {
		t.Errorf("without the controller's annotation: %+v; want a content-digest mismatch naming the annotation", v)
	}
}

// diff shows two values as JSON, one above the other.
func diff(a, b any) string {
	ja, _ := json.MarshalIndent(a, "", "  ")
	jb, _ := json.MarshalIndent(b, "", "  ")
	return string(ja) + "\n---\n" + string(jb)
}

// observeSpec plays the controller for rollout name: once its generation is ahead of what status
// observed, it records the generation and moves to phase.
func observeSpec(ctx context.Context, t *testing.T, name, phase string) *sync.WaitGroup {
	return playing(ctx, t, func(fr *v1alpha1.FleetRollout) bool {
		if fr.Name != name || fr.Generation <= fr.Status.ObservedGeneration {
			return false
		}
		fr.Status.ObservedGeneration, fr.Status.Phase = fr.Generation, phase
		return true
	})
}

// A write with --wait follows its job: it returns once the controller observed the generation the
// write produced and the rollout settled, or paused for an approval; with -o json it prints the
// change, the job handle and where the job ended; a wait that runs out exits 1 with the job's state.
func TestWriteWait(t *testing.T) {
	ctx := hub(t)
	held := newRollout(ctx, t, "wait-hold", nil)
	pctx, stop := context.WithCancel(ctx)
	wg := observeSpec(pctx, t, held.Name, v1alpha1.PhaseHeld)
	r := tidegate(ctx, "-n", writesNS, "hold", held.Name, "--reason", "freeze", "--wait", "-o", "json")
	stop()
	wg.Wait()
	if r.code != exitOK {
		t.Fatalf("hold --wait: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	var res writeResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("hold -o json: %v: %s", err, r.stdout)
	}
	after := get(ctx, t, held.Name)
	if !res.Change.Changed || res.Job.UID != after.UID || res.Job.Generation != after.Generation || res.Job.Generation == held.Generation ||
		res.Job.Rollout != (ops.Ref{Kind: "fleetrollout", Namespace: writesNS, Name: held.Name}) || res.Job.Candidate == nil || res.Job.Candidate.Digest != webCandidate.Digest {
		t.Errorf("job handle %+v, want the rollout's uid %s, its new generation %d and the candidate %s", res.Job, after.UID, after.Generation, webCandidate.Digest)
	}
	if res.Status == nil || res.Status.State != ops.JobSettled || res.Status.Phase != v1alpha1.PhaseHeld || res.Status.ObservedGeneration != after.Generation {
		t.Errorf("status %+v, want Settled in phase Held at generation %d", res.Status, after.Generation)
	}

	// Without -o, each state the job passes through is a progress line on stderr.
	paused := newRollout(ctx, t, "wait-approval", func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Hold = &v1alpha1.Hold{Reason: "x"}
		fr.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForApproval, Wave: "everyone", Message: "wave everyone needs an approval"}
	})
	pctx, stop = context.WithCancel(ctx)
	wg = observeSpec(pctx, t, paused.Name, v1alpha1.PhaseProgressing)
	r = tidegate(ctx, "-n", writesNS, "resume", paused.Name, "--wait")
	stop()
	wg.Wait()
	if r.code != exitOK || r.stdout != "fleetrollout writes/wait-approval: spec.hold cleared (was: x)\n" ||
		!strings.HasSuffix(r.stderr, "◎ fleetrollout writes/wait-approval: AwaitingApproval, phase Progressing, waiting for Approval (wave everyone): wave everyone needs an approval\n") {
		t.Errorf("resume --wait on a rollout awaiting approval: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}

	ignored := newRollout(ctx, t, "wait-ignored", nil)
	r = tidegate(ctx, "-n", writesNS, "retry", ignored.Name, "--wait", "--timeout", "2s", "-o", "json")
	res = writeResult{}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("retry -o json: %v: %q", err, r.stdout)
	}
	if r.code != exitNo || res.Status == nil || res.Status.State != ops.JobPending ||
		!strings.Contains(r.stderr, "error: fleetrollout writes/wait-ignored: the job is still Pending (phase Progressing)") {
		t.Errorf("a wait nobody answers: exit %d, status %+v, stderr %q; want exit 1, Pending", r.code, res.Status, r.stderr)
	}
}

// reconcile --with-source asks the tracked source to fetch first and waits for source-controller
// to have handled it (played here: the test hub runs no source-controller), then the rollout.
func TestReconcileWithSource(t *testing.T) {
	ctx := hub(t)
	fr := newRollout(ctx, t, "reconcile-source", func(fr *v1alpha1.FleetRollout) { fr.Spec.SourceRef.Name = "reconcile-source-repo" })
	repo := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "reconcile-source-repo", Namespace: writesNS},
		Spec:       sourcev1.GitRepositorySpec{URL: "https://example.com/fleet.git", Interval: metav1.Duration{Duration: time.Minute}},
	}
	if err := k8s.Create(ctx, repo); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), repo) })
	value := fixedNow.Format(time.RFC3339Nano)

	// Nobody answers for the source: the wait runs out before the rollout is asked.
	r := tidegate(ctx, "-n", writesNS, "reconcile", fr.Name, "--with-source", "--timeout", "2s")
	if r.code != exitNo || !strings.Contains(r.stderr, "did not handle the reconcile request "+value+" in time: is source-controller running?") {
		t.Errorf("reconcile --with-source without a source-controller: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	expectUnchanged(ctx, t, fr)

	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { // source-controller
		for pctx.Err() == nil {
			got := &sourcev1.GitRepository{}
			if err := k8s.Get(pctx, client.ObjectKeyFromObject(repo), got); err == nil {
				if v, ok := meta.ReconcileAnnotationValue(got.Annotations); ok && v != got.Status.LastHandledReconcileAt {
					got.Status.SetLastHandledReconcileRequest(v)
					got.Status.Artifact = &meta.Artifact{Revision: webCandidate.Revision, Digest: webCandidate.Digest, Path: "x", URL: "http://x", LastUpdateTime: metav1.Now()}
					got.Status.Conditions = []metav1.Condition{cond(meta.ReadyCondition, metav1.ConditionTrue, "Succeeded", "stored artifact", at(10, 0))}
					_ = k8s.Status().Update(pctx, got)
				}
			}
			select {
			case <-pctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	cwg := playController(pctx, t, map[string]metav1.ConditionStatus{fr.Name: metav1.ConditionUnknown})
	defer func() { stop(); wg.Wait(); cwg.Wait() }()
	r = tidegate(ctx, "-n", writesNS, "reconcile", fr.Name, "--with-source")
	expectRun(t, r, exitOK, "gitrepository writes/reconcile-source-repo: annotation reconcile.fluxcd.io/requestedAt set to "+value+"\n"+
		"gitrepository writes/reconcile-source-repo: fetched revision "+webCandidate.Revision+", Ready True\n"+
		"fleetrollout writes/reconcile-source: annotation reconcile.fluxcd.io/requestedAt set to "+value+"\n"+
		"fleetrollout writes/reconcile-source: reconciled: phase Progressing, Ready Unknown (GateFailed): wave everyone is blocked\n", "")
}
