package e2e

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
)

// crashAt makes the engine fail at one write point, once, and reports when it did: the test then
// stops that manager, as if the process had died there, and starts a fresh one.
type crashAt struct {
	point   string
	mu      sync.Mutex
	crashed bool
	hit     chan struct{}
}

func newCrashAt(point string) *crashAt { return &crashAt{point: point, hit: make(chan struct{})} }

func (c *crashAt) hook(point string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		// The process is "dead": it writes nothing more until the test replaces it.
		return errors.New("crashed")
	}
	if point == c.point {
		c.crashed = true
		close(c.hit)
		return errors.New("crash at " + point)
	}
	return nil
}

func (c *crashAt) wait(ctx context.Context, t *testing.T) {
	t.Helper()
	select {
	case <-c.hit:
	case <-ctx.Done():
		t.Fatalf("the engine never reached %s", c.point)
	}
}

func (s *fleetSetup) generations(t *testing.T, rollout string) map[string]int64 {
	out := map[string]int64{}
	for _, m := range s.members {
		if ks := s.kustomization(t, rollout, m.Name); ks != nil {
			out[m.Name] = ks.Generation
		}
	}
	return out
}

// The controller is stopped at points of a wave — after the wave's start is recorded but before its
// first switch, and halfway through a wave's switches — and a fresh one is started each time; a hold
// set while it is down is honoured. The rollout converges to the same outcome: every cluster switched
// exactly once (one generation per Kustomization), wave snapshots and start times unchanged.
func TestE2ECrashPointsDuringWaves(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 5, demoPackage("v1"))
	ctx, cancel := testContext(t, 10*time.Minute)
	defer cancel()
	h := startTidegate(t, s, controllers.Options{})
	s.rollOutFirst(ctx, t, first, nil)
	h.Stop(t)
	gen1 := s.generations(t, "web")

	// Crash 1: the ring wave is recorded as started, its first switch never happens.
	crash := newCrashAt("switch:member-2")
	h = startTidegate(t, s, controllers.Options{TestHook: crash.hook})
	rev2 := s.commitVersion(t, "v2")
	crash.wait(ctx, t)
	h.Stop(t)
	atCrash := s.rollout(t, "web")
	ring := atCrash.Status.Waves[1]
	if ring.Phase != v1alpha1.WaveProgressing || ring.StartedAt == nil || len(ring.Clusters) != 2 {
		t.Fatalf("at the crash the ring's start should be recorded: %s", describe(atCrash))
	}
	if ks := s.kustomization(t, "web", "member-2"); ks.Generation != gen1["member-2"] {
		t.Fatalf("member-2 was switched before the crash point")
	}
	// While the controller is down, someone holds the rollout.
	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) { fr.Spec.Hold = &v1alpha1.Hold{Reason: "investigating"} })

	// Crash 2 is armed for the last wave, halfway through its switches.
	crash = newCrashAt("switch:member-5")
	h = startTidegate(t, s, controllers.Options{TestHook: crash.hook})
	// The recorded ring wave finishes; the hold keeps the last wave from starting.
	eventually(ctx, t, "ring succeeded and rest held", func() (bool, string) {
		fr := s.rollout(t, "web")
		return fr.Status.Waves[1].Phase == v1alpha1.WaveSucceeded && fr.Status.Phase == v1alpha1.PhaseHeld, describe(fr)
	})
	s.reconciledAgain(ctx, t, "web", reconciles(t, s.ns, "web"), 2)
	if fr := s.rollout(t, "web"); fr.Status.Waves[2].Phase != v1alpha1.WavePending {
		t.Fatalf("the hold set while the controller was down was lost: %s", describe(fr))
	}
	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) { fr.Spec.Hold = nil })
	crash.wait(ctx, t)
	h.Stop(t)
	if ks := s.kustomization(t, "web", "member-4"); ks.Generation != gen1["member-4"]+1 {
		t.Fatalf("member-4 should have been switched before the crash at member-5 (generation %d, was %d)", ks.Generation, gen1["member-4"])
	}
	if ks := s.kustomization(t, "web", "member-5"); ks.Generation != gen1["member-5"] {
		t.Fatalf("member-5 was switched before the crash point")
	}

	startTidegate(t, s, controllers.Options{})
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	checkWaveOrder(t, done)
	if !done.Status.Waves[1].StartedAt.Equal(ring.StartedAt) || !equalStrings(done.Status.Waves[1].Clusters, ring.Clusters) {
		t.Errorf("the ring wave was started twice: at the crash %+v, at the end %+v", ring, done.Status.Waves[1])
	}
	gen2 := s.generations(t, "web")
	for c, g := range gen1 {
		if gen2[c] != g+1 {
			t.Errorf("%s's Kustomization went from generation %d to %d: want exactly one switch", c, g, gen2[c])
		}
		if v := s.memberVersion(ctx, c); v != "v2" {
			t.Errorf("%s runs %q, want v2", c, v)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
