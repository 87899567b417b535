package e2e

import (
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
)

// Two controllers run with leader election on the same hub, as two replicas would; the leader is
// stopped in the middle of the ring wave's soak and the standby takes over. The rollout completes
// as with one controller: every cluster switched once, one receipt per gate and wave, each
// recorded, the ring's soak counted from when it started, and the standby wrote nothing while it
// was not the leader.
func TestE2ELeaderFailoverMidSoak(t *testing.T) {
	t.Parallel()
	s, first := newFleetSetup(t, 5, demoPackage("v1"))
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	cfg := controllers.ManagerConfig{
		LeaderElection: true, LeaderElectionNamespace: s.ns,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
	}
	leader := startTidegateWith(t, s, s.f.HubConfig, cfg, controllers.Options{})
	select {
	case <-leader.elected:
	case <-ctx.Done():
		t.Fatal("the first controller was never elected")
	}
	// The standby's hook is called at each point where it would write: it must not before it leads.
	var (
		mu        sync.Mutex
		elected   <-chan struct{}
		premature []string
	)
	watchWrites := func(point string) error {
		mu.Lock()
		defer mu.Unlock()
		select {
		case <-elected:
		default:
			premature = append(premature, point)
		}
		return nil
	}
	standby := startTidegateWith(t, s, s.f.HubConfig, cfg, controllers.Options{TestHook: watchWrites})
	mu.Lock()
	elected = standby.elected
	mu.Unlock()
	const ringSoak = 15 * time.Second
	s.rollOutFirst(ctx, t, first, func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Waves[1].Soak = &metav1.Duration{Duration: ringSoak}
	})
	select {
	case <-standby.elected:
		t.Fatal("the standby was elected while the leader runs")
	default:
	}
	gen1 := s.generations(t, "web")
	rev2 := s.commitVersion(t, "v2")

	var soaking *v1alpha1.FleetRollout
	eventually(ctx, t, "the ring soaking", func() (bool, string) {
		soaking = s.rollout(t, "web")
		return soaking.Status.Candidate.Revision == rev2 && soaking.Status.Waves[1].Phase == v1alpha1.WaveSoaking, describe(soaking)
	})
	leader.Stop(t)
	ring := soaking.Status.Waves[1]
	if time.Until(ring.ReadyAt.Add(ringSoak)) <= 0 {
		t.Logf("the ring's soak was over when the leader stopped: the mid-soak point was missed")
	}
	select {
	case <-standby.elected:
	case <-ctx.Done():
		t.Fatal("the standby never took over")
	}

	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	mu.Lock()
	if len(premature) > 0 {
		t.Errorf("the standby came to write before it was elected: %v", premature)
	}
	mu.Unlock()
	checkWaveOrder(t, done)
	if got := done.Status.Waves[1]; !got.ReadyAt.Equal(ring.ReadyAt) || !got.StartedAt.Equal(ring.StartedAt) {
		t.Errorf("the ring's soak started again after the failover: readyAt %v then %v, startedAt %v then %v", ring.ReadyAt, got.ReadyAt, ring.StartedAt, got.StartedAt)
	}
	s.checkSwitches(ctx, t, gen1, func(string) int64 { return 1 }, "v2")
	s.checkDecisions(ctx, t, done, rev2, map[string][]string{"canary": canaryGates, "ring": laterGates, "rest": laterGates})
}
