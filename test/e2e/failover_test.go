package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/test/faultproxy"
)

// Two controllers run with leader election on the same hub, as two replicas would; the leader is
// stopped in the middle of the ring wave's soak and the standby takes over. The rollout completes
// as with one controller: every cluster switched once, one receipt per gate and wave, each
// recorded, the ring's soak counted from when it started, and the standby wrote nothing while it
// was not the leader.
func TestE2ELeaderFailoverMidSoak(t *testing.T) {
	parallel(t)
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

// Two controllers with leader election; the leader reaches the hub through a fault proxy. When it
// decides that the canary succeeded, its status write is held on the wire (a Late fault: passed on
// 30 s later whether or not its controller still waits) and its lease renewals are blackholed, so
// it loses its lease in the middle of that pass. The standby takes over, takes the decision up from
// its receipt, and goes on with the next waves. Then the deposed leader's write reaches the hub,
// computed from a read in which the canary still soaked: the hub refuses it with a Conflict (the
// resourceVersion it carries is stale), no wave goes back at any moment, and the rollout completes
// with one decision per gate and wave.
func TestE2EADeposedLeadersLateWriteUndoesNothing(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 5, demoPackage("v1"))
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	p, err := faultproxy.New(s.f.HubConfig)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	viaProxy, err := p.Config(s.f.HubConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg := controllers.ManagerConfig{
		LeaderElection: true, LeaderElectionNamespace: s.ns,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
	}
	const late = 30 * time.Second
	var armed atomic.Bool
	depose := func(point string) error {
		if point == "status:wave:canary:"+v1alpha1.WaveSucceeded && armed.CompareAndSwap(true, false) {
			p.Set(faultproxy.Late(late).Only(faultproxy.Method(http.MethodPatch), faultproxy.Resource("fleetrollouts")),
				faultproxy.Blackhole().Only(faultproxy.Resource("leases")))
		}
		return nil
	}
	leader := startTidegateWith(t, s, viaProxy, cfg, controllers.Options{TestHook: depose})
	select {
	case <-leader.elected:
	case <-ctx.Done():
		t.Fatal("the first controller was never elected")
	}
	standby := startTidegateWith(t, s, s.f.HubConfig, cfg, controllers.Options{})
	s.rollOutFirst(ctx, t, first, nil)

	// Every phase each wave of v2 goes through, in order, as the hub records them.
	wc, err := client.NewWithWatch(s.f.HubConfig, client.Options{Scheme: s.f.Hub.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &v1alpha1.FleetRolloutList{}, client.InNamespace(s.ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	armed.Store(true)
	rev2 := s.commitVersion(t, "v2")
	var (
		mu      sync.Mutex
		went    []string
		watched = make(chan struct{})
	)
	go func() {
		defer close(watched)
		order := map[string]int{v1alpha1.WavePending: 0, v1alpha1.WaveProgressing: 1, v1alpha1.WaveSoaking: 2, v1alpha1.WaveSucceeded: 3}
		highest := map[string]int{}
		for ev := range w.ResultChan() {
			fr, ok := ev.Object.(*v1alpha1.FleetRollout)
			if !ok || fr.Status.Candidate == nil || fr.Status.Candidate.Revision != rev2 {
				continue
			}
			mu.Lock()
			for _, wv := range fr.Status.Waves {
				if o, known := order[wv.Phase]; known {
					if h, seen := highest[wv.Name]; seen && o < h {
						went = append(went, fmt.Sprintf("wave %s back to %s (resourceVersion %s)", wv.Name, wv.Phase, fr.ResourceVersion))
					}
					highest[wv.Name] = max(highest[wv.Name], o)
				}
			}
			mu.Unlock()
		}
	}()

	select {
	case <-standby.elected:
	case <-ctx.Done():
		t.Fatal("the standby never took over from the deposed leader")
	}
	eventually(ctx, t, "the deposed leader's late write answered", func() (bool, string) {
		return len(p.LateAnswers()) > 0, fmt.Sprintf("%v", p.LateAnswers())
	})
	for _, code := range p.LateAnswers() {
		if code != http.StatusConflict {
			t.Errorf("the deposed leader's late write was answered %d, want 409 Conflict", code)
		}
	}
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	w.Stop()
	<-watched
	mu.Lock()
	if len(went) > 0 {
		t.Errorf("a wave went back: %v", went)
	}
	mu.Unlock()
	checkWaveOrder(t, done)
	s.checkDecisions(ctx, t, done, rev2, map[string][]string{"canary": canaryGates, "ring": laterGates, "rest": laterGates})
}
