package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

func TestStepNarratives(t *testing.T) {
	t.Run("first rollout then an update, wave by wave", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.run("r1", v1alpha1.PhaseCompleted)
		s.expect(
			"Progressing canary=Pending[] rest=Pending[]",
			"Progressing canary=Progressing[a] rest=Pending[]",
			"Progressing canary=Soaking[a] rest=Pending[]",
			"Progressing canary=Succeeded[a] rest=Pending[]",
			"Progressing canary=Succeeded[a] rest=Progressing[b c]",
			"Progressing canary=Succeeded[a] rest=Soaking[b c]",
			"Progressing canary=Succeeded[a] rest=Succeeded[b c]",
			"Completed canary=Succeeded[a] rest=Succeeded[b c] knownGood=r1",
		)
		s.run("r2", v1alpha1.PhaseCompleted)
		if s.fr.Status.LastKnownGood.Revision != "r2" || s.ks["c"].LastApplied != "r2" {
			t.Errorf("after r2: %+v %+v", s.fr.Status.LastKnownGood, s.ks["c"])
		}
	})
	t.Run("broken canary holds; the rest never switch", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.run("r1", v1alpha1.PhaseCompleted)
		s.log = nil
		s.broken["a"] = true
		s.run("r2", v1alpha1.PhaseHeld)
		s.expect(
			"Progressing canary=Pending[] rest=Pending[] knownGood=r1",
			"Progressing canary=Progressing[a] rest=Pending[] knownGood=r1",
			"Held canary=Failed[a] rest=Pending[] knownGood=r1",
		)
		if s.ks["b"].LastApplied != "r1" || s.ks["c"].LastApplied != "r1" {
			t.Errorf("clusters outside the canary switched: %+v", s.ks)
		}
	})
	t.Run("broken canary rolls back and the candidate is rejected", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
		s.run("r1", v1alpha1.PhaseCompleted)
		s.log = nil
		s.broken["a"] = true
		s.run("r2", v1alpha1.PhaseRolledBack)
		s.expect(
			"Progressing canary=Pending[] rest=Pending[] knownGood=r1",
			"Progressing canary=Progressing[a] rest=Pending[] knownGood=r1",
			"RollingBack canary=Failed[a] rest=Pending[] knownGood=r1",
			"RolledBack canary=RolledBack[a] rest=Pending[] knownGood=r1",
		)
		if s.ks["a"].LastApplied != "r1" || !s.fr.IsRejected("r2") {
			t.Errorf("canary at %q, rejected %+v", s.ks["a"].LastApplied, s.fr.Status.Rejected)
		}
		// The rejected revision is not retried until spec.retry changes.
		s.run("r2", v1alpha1.PhaseRolledBack)
		s.broken["a"] = false
		s.fr.Spec.Retry = "1"
		s.run("r2", v1alpha1.PhaseCompleted)
		if s.fr.Status.LastKnownGood.Revision != "r2" {
			t.Errorf("retry did not roll r2 out: %+v", s.fr.Status)
		}
	})
	t.Run("a first rollout that fails has nothing to roll back to and holds", func(t *testing.T) {
		s := newSim(t, "a", "b")
		s.fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
		s.broken["a"] = true
		s.run("r1", v1alpha1.PhaseHeld)
		if s.fr.Status.LastKnownGood != nil || s.ks["b"].Exists {
			t.Errorf("a failed first rollout must not touch other clusters: %+v", s.ks)
		}
	})
	t.Run("hold stops before the next wave; clearing it resumes", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.run("r1", v1alpha1.PhaseCompleted)
		s.fr.Spec.Hold = &v1alpha1.Hold{Reason: "freeze"}
		s.log = nil
		s.run("r2", v1alpha1.PhaseHeld)
		for i := 0; i < 5; i++ {
			s.run("r2", v1alpha1.PhaseHeld)
		}
		if s.fr.Status.Waves[0].Phase != v1alpha1.WavePending {
			t.Errorf("a wave started while held: %+v", s.fr.Status.Waves)
		}
		s.fr.Spec.Hold = nil
		s.run("r2", v1alpha1.PhaseCompleted)
	})
	t.Run("a wave that requires an approval waits for one naming the revision", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.fr.Spec.Waves[1].RequireApproval = true
		s.fr.Spec.Approvals = []v1alpha1.Approval{{Revision: "r1"}}
		s.run("r1", v1alpha1.PhaseCompleted)
		s.log = nil
		s.run("r2", v1alpha1.PhaseProgressing)
		for i := 0; i < 20; i++ {
			s.run("r2", v1alpha1.PhaseProgressing)
			s.flux(mustPlan(t, s))
			s.now = s.now.Add(2 * time.Second)
		}
		if w := s.fr.Status.Waves[1]; w.Phase != v1alpha1.WaveAwaiting || len(w.Clusters) != 0 {
			t.Fatalf("the rest wave should await an approval of r2 (an approval of r1 does not count): %+v", w)
		}
		s.fr.Spec.Approvals = append(s.fr.Spec.Approvals, v1alpha1.Approval{Revision: "r2", Wave: "canary"})
		s.run("r2", v1alpha1.PhaseProgressing)
		if w := s.fr.Status.Waves[1]; w.Phase != v1alpha1.WaveAwaiting {
			t.Fatalf("an approval for another wave does not count: %+v", w)
		}
		s.fr.Spec.Approvals = append(s.fr.Spec.Approvals, v1alpha1.Approval{Revision: "r2", Wave: "rest"})
		s.run("r2", v1alpha1.PhaseCompleted)
	})
	t.Run("a wave of a template edit waits for an approval naming its build", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.fr.Spec.Waves[1].RequireApproval = true
		s.fr.Spec.Approvals = []v1alpha1.Approval{{Revision: "r1"}}
		s.run("r1", v1alpha1.PhaseCompleted)
		s.fr.Spec.Template.TargetNamespace = "edited"
		s.untilWave("r1", 1, v1alpha1.WaveAwaiting)
		c := s.fr.Status.Candidate
		if w := s.fr.Status.Waves[1]; w.Phase != v1alpha1.WaveAwaiting || !strings.Contains(s.fr.Status.WaitingFor.Message, "buildHash: \""+c.BuildHash) {
			t.Fatalf("the approval of r1 alone does not approve the edit's rest wave: %+v %+v", w, s.fr.Status.WaitingFor)
		}
		s.fr.Spec.Approvals = append(s.fr.Spec.Approvals, v1alpha1.Approval{Revision: "r1", Wave: "rest", BuildHash: c.BuildHash})
		s.run("r1", v1alpha1.PhaseCompleted)
		if s.fr.Status.LastKnownGood.BuildHash != c.BuildHash {
			t.Errorf("the approved edit completed: %+v", s.fr.Status.LastKnownGood)
		}
	})
	t.Run("a newer revision waits for the one in progress", func(t *testing.T) {
		s := newSim(t, "a", "b", "c")
		s.run("r1", v1alpha1.PhaseCompleted)
		s.run("r2", v1alpha1.PhaseProgressing)
		for i := 0; i < 3; i++ {
			s.run("r2", v1alpha1.PhaseProgressing)
			s.flux(mustPlan(t, s))
		}
		s.run("r3", v1alpha1.PhaseCompleted)
		if s.fr.Status.Candidate.Revision != "r2" {
			t.Fatalf("r3 superseded r2 mid-rollout: %+v", s.fr.Status.Candidate)
		}
		s.run("r3", v1alpha1.PhaseProgressing)
		s.run("r3", v1alpha1.PhaseCompleted)
		if s.fr.Status.LastKnownGood.Revision != "r3" {
			t.Errorf("r3 never rolled out after r2: %+v", s.fr.Status)
		}
	})
}

func TestStepTransientFluxStates(t *testing.T) {
	t.Run("a healthy release at 1,000 clusters completes while Flux re-reconciles members all the time", func(t *testing.T) {
		s := fleet(t, 1000, 10)
		s.throughput = 8 // 4 Kustomizations a second
		s.run("r1", v1alpha1.PhaseCompleted)
		// About 25 members are mid-reconcile at any moment (Ready and Healthy Unknown): never are
		// all of a wave's members Ready at once, yet each one's last reconcile passed.
		s.weather = every(40, "busy")
		busyAtDecision := 0
		for turn := 0; turn < 600 && (turn == 0 || s.fr.Status.Phase != v1alpha1.PhaseCompleted); turn++ {
			res, plan := s.turn("r2")
			if res.GateWave >= 0 && slices.Contains(res.Gates, v1alpha1.GateNoDisruption) {
				for _, c := range s.fr.Status.Waves[res.GateWave].Clusters {
					if s.ks[c].Progressing {
						busyAtDecision++
					}
				}
			}
			s.flux(plan)
			s.now = s.now.Add(2 * time.Second)
		}
		if s.fr.Status.Phase != v1alpha1.PhaseCompleted || s.fr.Status.LastKnownGood.Revision != "r2" {
			t.Fatalf("the release did not complete: %s %+v", s.fr.Status.Phase, s.fr.Status.WaitingFor)
		}
		for _, wv := range s.fr.Status.Waves {
			if o := GateOutcome(&wv, v1alpha1.GateNoDisruption); o == nil || o.Result != v1alpha1.ResultPass {
				t.Errorf("wave %s: noDisruption %+v", wv.Name, o)
			}
		}
		if busyAtDecision == 0 {
			t.Errorf("no member was mid-reconcile when a wave was decided: the test shows nothing")
		}
	})
	t.Run("without status.history a member mid-reconcile at the end of the soak is waited for, then judged as seen", func(t *testing.T) {
		s := restSoaking(t, true)
		readyAt := s.fr.Status.Waves[1].ReadyAt.Time
		s.weather = func(_ int, c string) string {
			if c == "b" {
				return "busy"
			}
			return ""
		}
		var settled bool
		for s.fr.Status.Phase == v1alpha1.PhaseProgressing {
			s.once("r2")
			if wf := s.fr.Status.WaitingFor; wf != nil && wf.Reason == v1alpha1.WaitingForSettle {
				settled = true
				if !strings.Contains(wf.Message, "1 cluster is between two reconcile outcomes (b)") {
					t.Errorf("settle message: %q", wf.Message)
				}
			}
		}
		wv := s.fr.Status.Waves[1]
		if !settled || s.fr.Status.Phase != v1alpha1.PhaseHeld || wv.Phase != v1alpha1.WaveFailed {
			t.Fatalf("want a wait to settle, then a failed wave: settled=%v %s %+v", settled, s.fr.Status.Phase, wv)
		}
		if decided := wv.FinishedAt.Sub(readyAt); decided < 10*time.Second+settleGrace || decided > 10*time.Second+settleGrace+4*time.Second {
			t.Errorf("decided %s after readyAt, want the soak and the settle bound (%s)", decided, 10*time.Second+settleGrace)
		}
	})
	t.Run("a member that settles during the wait passes", func(t *testing.T) {
		s := restSoaking(t, true)
		until := s.turns + 10 // busy through the soak's end, settled 20 s after it
		s.weather = func(turn int, c string) string {
			if c == "b" && turn < until {
				return "busy"
			}
			return ""
		}
		var waited bool
		for s.fr.Status.Phase == v1alpha1.PhaseProgressing {
			s.once("r2")
			waited = waited || (s.fr.Status.WaitingFor != nil && s.fr.Status.WaitingFor.Reason == v1alpha1.WaitingForSettle)
		}
		if !waited || s.fr.Status.Phase != v1alpha1.PhaseCompleted {
			t.Fatalf("want a wait to settle, then completion: waited=%v %s", waited, s.fr.Status.Phase)
		}
	})
	t.Run("a retried apply failure of the applied revision during the soak is waited for, not judged", func(t *testing.T) {
		s := restSoaking(t, false)
		from := s.turns + 1
		s.weather = func(turn int, c string) string {
			if c == "b" && turn >= from && turn < from+3 {
				return "retrying"
			}
			return ""
		}
		s.log = nil
		s.run("r2", v1alpha1.PhaseCompleted)
		s.expect(
			"Progressing canary=Succeeded[a] rest=Succeeded[b c] knownGood=r1",
			"Completed canary=Succeeded[a] rest=Succeeded[b c] knownGood=r2",
		)
	})
	t.Run("a retried failure still there past the bound fails the wave", func(t *testing.T) {
		s := restSoaking(t, false)
		s.weather = func(_ int, c string) string {
			if c == "b" {
				return "retrying"
			}
			return ""
		}
		s.run("r2", v1alpha1.PhaseHeld)
		if wv := s.fr.Status.Waves[1]; wv.Phase != v1alpha1.WaveFailed || wv.FinishedAt.Sub(wv.ReadyAt.Time) < 10*time.Second+settleGrace {
			t.Fatalf("want the wave failed after its soak and the settle bound: %+v", wv)
		}
	})
}

// A tracked source that refused its newest artifact (its signature did not verify) keeps serving
// the last one it verified: a rollout of that one goes on as ever, and at rest the rollout says it
// waits for the source, with source-controller's reason, until the source verifies again.
func TestStepTrackedSourceRefused(t *testing.T) {
	s := newSim(t, "a", "b")
	s.run("r1", v1alpha1.PhaseCompleted)
	if wf := s.fr.Status.WaitingFor; wf != nil {
		t.Fatalf("a rollout at rest on a verified source waits for %+v", wf)
	}
	const refused = "OCIRepository web refused the newest artifact of its reference and serves r2, the last it verified: no matching signatures"
	s.trackedRefused = refused
	s.untilWave("r2", 0, v1alpha1.WaveSoaking)
	if wf := s.fr.Status.WaitingFor; wf == nil || wf.Reason != v1alpha1.WaitingForSoak {
		t.Errorf("the rollout of the last verified artifact should soak as ever: %+v", wf)
	}
	s.run("r2", v1alpha1.PhaseCompleted)
	s.once("r2")
	if wf := s.fr.Status.WaitingFor; wf == nil || wf.Reason != v1alpha1.WaitingForSource || wf.Message != refused {
		t.Fatalf("at rest, the rollout should wait for the source that refused its newest artifact: %+v", wf)
	}
	if s.fr.Status.RunningCount != 2 {
		// Ready says it runs on them, and what the source refused (TestSetConditions).
		t.Errorf("status should count the clusters that run it: %d", s.fr.Status.RunningCount)
	}
	s.trackedRefused = ""
	s.once("r2")
	if wf := s.fr.Status.WaitingFor; wf != nil || s.fr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Errorf("once the source verifies again nothing is waited for: %s %+v", s.fr.Status.Phase, wf)
	}
}

func TestWaveDeadlineGrowsWithTheWave(t *testing.T) {
	fr := &v1alpha1.FleetRollout{}
	fr.Spec.Template.Timeout = &metav1.Duration{Duration: 30 * time.Second}
	wave := func(n int) *v1alpha1.WaveStatus {
		wv := &v1alpha1.WaveStatus{}
		for i := 0; i < n; i++ {
			wv.Clusters = append(wv.Clusters, fmt.Sprint(i))
		}
		return wv
	}
	if got := waveDeadline(fr, wave(1)); got != 2*time.Minute+500*time.Millisecond {
		t.Errorf("one member: %s", got)
	}
	if got := waveDeadline(fr, wave(1000)); got != 2*time.Minute+500*time.Second {
		t.Errorf("1,000 members: %s", got)
	}

	t.Run("a 1,000-cluster wave that Flux applies at 4 a second makes its deadline", func(t *testing.T) {
		s := fleet(t, 1000, 0)
		s.fr.Spec.Template.Timeout = &metav1.Duration{Duration: 30 * time.Second}
		s.throughput = 8
		s.runFor("r1", v1alpha1.PhaseCompleted, 400)
		rest := s.fr.Status.Waves[1]
		if took := rest.ReadyAt.Sub(rest.StartedAt.Time); took <= 2*time.Minute {
			t.Fatalf("the wave took %s: not longer than the size-blind deadline, the test shows nothing", took)
		}
	})
	t.Run("a wave whose member never becomes Ready fails at its deadline", func(t *testing.T) {
		s := fleet(t, 1000, 0)
		s.fr.Spec.Template.Timeout = &metav1.Duration{Duration: 30 * time.Second}
		s.throughput = 8
		s.noHistory = true
		s.weather = func(_ int, c string) string {
			if c == "c0500" {
				return "busy"
			}
			return ""
		}
		s.runFor("r1", v1alpha1.PhaseHeld, 600)
		rest := s.fr.Status.Waves[1]
		deadline := waveDeadline(s.fr, &rest)
		if took := rest.FinishedAt.Sub(rest.StartedAt.Time); rest.Phase != v1alpha1.WaveFailed || took < deadline || took > deadline+4*time.Second {
			t.Fatalf("want the wave failed at its deadline %s: %s after %s", deadline, rest.Phase, took)
		}
	})
}

// The soak ends when the status says it does: readyAt is kept to the second by the API server, so
// the wave's readyAt is that second and the requeue that ends the soak counts from it, not from the
// fraction of a second after it when the last member was seen Ready.
func TestSoakEndsAtTheRecordedReadyAt(t *testing.T) {
	s := newSim(t, "a", "b")
	s.now = s.now.Truncate(time.Second).Add(700 * time.Millisecond)
	for turn := 0; turn < 50; turn++ {
		res, _ := s.turn("r1")
		if wv := s.fr.Status.Waves; len(wv) > 0 && wv[0].Phase == v1alpha1.WaveSoaking {
			readyAt := wv[0].ReadyAt.Time
			if !readyAt.Equal(readyAt.Truncate(time.Second)) || readyAt.After(s.now) {
				t.Fatalf("readyAt %s: want the second of %s", readyAt.Format(time.RFC3339Nano), s.now.Format(time.RFC3339Nano))
			}
			if want := readyAt.Add(10 * time.Second).Sub(s.now); res.RequeueAfter != want {
				t.Fatalf("requeue after %s: want %s, the soak's end from readyAt %s, now %s", res.RequeueAfter, want,
					readyAt.Format(time.RFC3339Nano), s.now.Format(time.RFC3339Nano))
			}
			return
		}
		s.note()
		s.flux(s.plan)
		s.now = s.now.Add(2 * time.Second)
	}
	t.Fatalf("the canary never soaked:\n%s", strings.Join(s.log, "\n"))
}
