package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/simulator"
	"github.com/tidegate/tidegate/test/faultproxy"
)

// controllerAgent is the User-Agent of the controller under test when it reaches the hub through
// the scenario's hub proxy (startTidegateThroughHubProxy): faults scoped with byController meet its
// requests only, whoever else goes through the proxy.
const controllerAgent = "tidegate-controller-under-test"

// byController selects the requests of the controller under test.
func byController(r *http.Request) bool { return strings.HasPrefix(r.UserAgent(), controllerAgent) }

// startTidegateThroughHubProxy runs the controller against the hub's fault proxy, under its own
// User-Agent.
func startTidegateThroughHubProxy(t *testing.T, s *fleetSetup, opts controllers.Options) *controllerHandle {
	t.Helper()
	if s.proxies == nil || s.proxies.HubConfig == nil {
		t.Fatal("the scenario has no hub fault proxy: set it up with newFleetSetupProxied naming \"hub\"")
	}
	cfg := rest.CopyConfig(s.proxies.HubConfig)
	cfg.UserAgent = controllerAgent
	return startTidegateOn(t, s, cfg, opts)
}

// converged checks that the rollout of rev ended where it should and lost nothing on the way: every
// member's Kustomization was switched exactly once since before (generations counted before rev),
// except the clusters in extra, whose Kustomizations were written that many times more by someone
// else and restored; every member runs version; and every gate each wave recorded has exactly one
// passing receipt of rev, the one the status names, with no passing receipt the status does not name.
func (s *fleetSetup) converged(ctx context.Context, t *testing.T, fr *v1alpha1.FleetRollout, before map[string]int64, extra map[string]int64, version string) {
	t.Helper()
	after := s.generations(t, fr.Name)
	for c, g := range before {
		if want := g + 1 + extra[c]; after[c] != want {
			t.Errorf("%s's Kustomization went from generation %d to %d, want %d (switched once)", c, g, after[c], want)
		}
	}
	for c := range before {
		if v := s.memberVersion(ctx, c); v != version {
			t.Errorf("%s runs %q, want %s", c, v, version)
		}
	}
	s.receiptsConsistent(ctx, t, fr)
}

// receiptsConsistent checks the receipts of the rollout's candidate against its waves: each gate a
// wave recorded has exactly one passing receipt, the one the wave names, and no passing receipt is
// one the status does not name (a decision recorded twice, or made and lost).
func (s *fleetSetup) receiptsConsistent(ctx context.Context, t *testing.T, fr *v1alpha1.FleetRollout) {
	t.Helper()
	rev := fr.Status.Candidate.Revision
	passing := map[string][]string{}
	for _, rc := range s.receiptsOf(ctx, t, fr.Name, rev) {
		if rc.Spec.Result == v1alpha1.ResultPass {
			k := rc.Spec.Wave + "/" + rc.Spec.Gate
			passing[k] = append(passing[k], rc.Name)
		}
	}
	named := map[string]bool{}
	for _, w := range fr.Status.Waves {
		if len(w.Gates) == 0 && w.Phase != v1alpha1.WaveSkipped {
			t.Errorf("wave %s of %s recorded no gate: %s", w.Name, rev, describe(fr))
		}
		for _, g := range w.Gates {
			k := w.Name + "/" + g.Gate
			named[k] = true
			if got := passing[k]; g.Result != v1alpha1.ResultPass || len(got) != 1 || got[0] != g.Receipt {
				t.Errorf("wave %s %s: status says %s (receipt %s), passing receipts of %s %v: want exactly that one",
					w.Name, g.Gate, g.Result, g.Receipt, rev, got)
			}
		}
	}
	for k, names := range passing {
		if !named[k] {
			t.Errorf("passing receipts %v of %s for %s, which no wave records", names, k, rev)
		}
	}
}

// soakOfTwoSamples is the soak of the waves whose noDisruption the fault scenarios need decided
// over samples: two of the default policy's sample intervals (5 s). The samples count from the
// readyAt recorded, which a failed status write or a loaded machine moves later than the soak
// loop's first sample, so a soak shorter than the interval (testSoak) can end with none in it.
const soakOfTwoSamples = 10 * time.Second

// rolledOutThroughHubProxy sets a scenario up on three members of the shared fleet with a proxy of
// its own in front of the hub, the controller reaching the hub through it, and rolls v1 out; it
// returns the Kustomizations' generations then.
func rolledOutThroughHubProxy(ctx context.Context, t *testing.T) (*fleetSetup, map[string]int64) {
	t.Helper()
	s, first := newFleetSetupProxied(t, 3, demoPackage("v1"), []string{"hub"})
	startTidegateThroughHubProxy(t, s, controllers.Options{})
	s.rollOutFirst(ctx, t, first, func(fr *v1alpha1.FleetRollout) {
		for i := range fr.Spec.Waves {
			fr.Spec.Waves[i].Soak = &metav1.Duration{Duration: soakOfTwoSamples}
		}
	})
	return s, s.generations(t, "web")
}

// The controller's requests to the hub meet a storm (every one answered 429 with Retry-After or
// 503) while the canary of a new revision is under way, until 20 of them have failed, then it
// heals. Flux, on the same
// hub, is not affected. The rollout completes: every cluster switched once, every gate decided
// once with one passing receipt.
func TestE2EFaultHubStorm(t *testing.T) {
	parallel(t)
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	s, before := rolledOutThroughHubProxy(ctx, t)

	rev2 := s.commitVersion(t, "v2")
	eventually(ctx, t, "the canary under way at "+rev2, func() (bool, string) {
		fr := s.rollout(t, "web")
		return fr.Status.Candidate != nil && fr.Status.Candidate.Revision == rev2 &&
			fr.Status.Waves[0].Phase != v1alpha1.WavePending, describe(fr)
	})
	_, injectedBefore := s.proxies.Hub.Counts()
	s.proxies.Hub.Set(
		faultproxy.TooManyRequests(time.Second).Only(byController).OneIn(2),
		faultproxy.ServerError(http.StatusServiceUnavailable).Only(byController),
	)
	// The storm lasts until it has failed 20 of the controller's requests, however slow they come.
	eventually(ctx, t, "the storm failing 20 of the controller's requests", func() (bool, string) {
		_, injected := s.proxies.Hub.Counts()
		return injected-injectedBefore >= 20, fmt.Sprintf("%d failed", injected-injectedBefore)
	})
	s.proxies.Hub.Clear()
	t.Logf("storm during %s", describe(s.rollout(t, "web")))

	fr := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	checkWaveOrder(t, fr)
	s.converged(ctx, t, fr, before, nil, "v2")
}

// While a revision rolls out, the controller's writes to the FleetRollout (status, finalizer) are
// answered 409 Conflict one in two, and another writer keeps changing the rollout's annotations.
// The rollout completes with nothing lost: every gate decided once with one passing receipt, every
// cluster switched once, and the other writer's last annotation still there.
func TestE2EFaultConflictsOnTheRollout(t *testing.T) {
	parallel(t)
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	s, before := rolledOutThroughHubProxy(ctx, t)

	s.proxies.Hub.Set(faultproxy.Conflict().Only(byController, faultproxy.Resource("fleetrollouts"),
		faultproxy.Method(http.MethodPatch, http.MethodPut)).OneIn(2))
	// The other writer: an annotation changed every 300 ms, with the usual read-modify-write.
	const note = "example.com/note"
	var (
		mu   sync.Mutex
		last string
	)
	// Stopping it ends the loop between two writes, never during one: a write cancelled in flight
	// may have been applied with its answer lost, and its value would then be unknown.
	stop, writerDone := make(chan struct{}), make(chan struct{})
	stopWriter := func() { close(stop) }
	go func() {
		defer close(writerDone)
		for i := 0; ctx.Err() == nil; i++ {
			value := fmt.Sprint(i)
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				var fr v1alpha1.FleetRollout
				if err := s.f.Hub.Get(ctx, keyOf(s.ns, "web"), &fr); err != nil {
					return err
				}
				if fr.Annotations == nil {
					fr.Annotations = map[string]string{}
				}
				fr.Annotations[note] = value
				return s.f.Hub.Update(ctx, &fr)
			})
			if err == nil {
				mu.Lock()
				last = value
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()

	rev2 := s.commitVersion(t, "v2")
	fr := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	stopWriter()
	<-writerDone
	s.proxies.Hub.Clear()
	if _, injected := s.proxies.Hub.Counts(); injected < 5 {
		t.Fatalf("%d of the controller's writes met a conflict: too few to show anything", injected)
	}
	checkWaveOrder(t, fr)
	s.converged(ctx, t, fr, before, nil, "v2")
	fr = s.rollout(t, "web")
	mu.Lock()
	defer mu.Unlock()
	if got := fr.Annotations[note]; got != last {
		t.Errorf("the other writer's annotation %s is %q, want its last write %q", note, got, last)
	}
}

// A FleetCluster of the wave under way is deleted while the wave soaks. The wave does not wedge:
// the deleted cluster is reported missing and counted against the wave's failure budget (one), the
// wave and the rollout complete, and the clusters still in the fleet run the revision. The
// departed cluster's Kustomization is then orphaned at the known-good, on record.
func TestE2EFaultFleetClusterDeletedMidWave(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 3, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	one := int32(1)
	fr := twoWaveRollout(s.ns)
	fr.Spec.Waves[1].MaxFailures = &one
	fr.Spec.Waves[0].Soak.Duration = soakOfTwoSamples
	fr.Spec.Waves[1].Soak.Duration = 15 * time.Second
	s.createRollout(ctx, t, fr, s.repo.Revision(first), nil)
	before := s.generations(t, "web")

	rev2 := s.commitVersion(t, "v2")
	var gone string
	eventually(ctx, t, "the rest wave of "+rev2+" under way", func() (bool, string) {
		fr = s.rollout(t, "web")
		ok := fr.Status.Candidate != nil && fr.Status.Candidate.Revision == rev2 &&
			(fr.Status.Waves[1].Phase == v1alpha1.WaveProgressing || fr.Status.Waves[1].Phase == v1alpha1.WaveSoaking)
		if ok {
			gone = fr.Status.Waves[1].Clusters[len(fr.Status.Waves[1].Clusters)-1]
		}
		return ok, describe(fr)
	})
	if err := s.f.Hub.Delete(ctx, &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: gone}}); err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted FleetCluster %s during %s", gone, describe(fr))

	fr = s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	rest := fr.Status.Waves[1]
	if !equalStrings(rest.Missing, []string{gone}) || !slices.Contains(rest.Clusters, gone) {
		t.Errorf("the rest wave should keep %s as a member and report it missing: %+v", gone, rest)
	}
	delete(before, gone)
	s.converged(ctx, t, fr, before, nil, "v2")
	if rc := latestReceipt(s.receiptsOf(ctx, t, "web", rev2), v1alpha1.GateNoDisruption, "rest"); rc == nil || !limitsContain(rc, gone) {
		t.Errorf("the rest wave's noDisruption receipt should say what is not known of %s: %+v", gone, rc)
	}
	// At rest, the departed cluster's Kustomization is orphaned on record at the revision it runs:
	// v2, or v1 when its FleetCluster went before the wave switched it. The member keeps running
	// it, managed by nothing.
	version := map[string]string{rev2: "v2", s.repo.Revision(first): "v1"}
	eventually(ctx, t, gone+" orphaned", func() (bool, string) {
		fr = s.rollout(t, "web")
		o := fr.Status.Orphaned
		return len(o) == 1 && o[0].Cluster == gone && version[o[0].Revision] != "" && s.kustomization(t, "web", gone) == nil,
			fmt.Sprintf("%+v %s", o, describe(fr))
	})
	if want := version[fr.Status.Orphaned[0].Revision]; s.memberVersion(ctx, gone) != want {
		t.Errorf("%s runs %q once orphaned, want %s", gone, s.memberVersion(ctx, gone), want)
	}
}

// source-controller is restarted with its storage emptied while the canary of a revision that fails
// on the last wave soaks: every artifact, the pinned known-good's too, is gone. source-controller
// builds them again; the failing wave rolls back to the known-good (whose artifact rollbackSucceeds
// found again), and a later healthy revision completes.
func TestE2EFaultSourceControllerLosesItsStorage(t *testing.T) {
	parallel(t)
	// A fleet of its own: it restarts source-controller and empties its storage.
	s, first := newFleetSetupWith(t, 3, demoPackage("v1"), localfleet.Options{})
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 10*time.Minute)
	defer cancel()
	rev1 := s.repo.Revision(first)
	s.createRollout(ctx, t, twoWaveRollout(s.ns), rev1, func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Rollback.OnFailure = v1alpha1.OnFailureRollback
		fr.Spec.Waves[0].Soak.Duration = 15 * time.Second
		fr.Spec.Waves[1].Soak.Duration = soakOfTwoSamples
	})
	fr := s.rollout(t, "web")
	canary := fr.Status.Waves[0].Clusters[0]
	for _, m := range s.members {
		if m.Name != canary {
			s.faults.SetFault(m.Name, simulator.Fault{Workload: "web", Mode: simulator.NeverAvailable, Image: ":v2"})
		}
	}

	rev2 := s.commitVersion(t, "v2")
	eventually(ctx, t, "the canary of "+rev2+" soaking", func() (bool, string) {
		fr = s.rollout(t, "web")
		return fr.Status.Candidate != nil && fr.Status.Candidate.Revision == rev2 && fr.Status.Waves[0].Phase == v1alpha1.WaveSoaking, describe(fr)
	})
	if err := s.f.RestartSourceController(ctx, true); err != nil {
		t.Fatal(err)
	}
	t.Logf("source-controller restarted with its storage emptied during %s", describe(fr))

	fr = s.waitPhase(ctx, t, "web", v1alpha1.PhaseRolledBack, rev2)
	// The canary, whose Kustomization waited for its artifact while it soaked, passed; the last
	// wave failed on its broken workload.
	receipts := s.receiptsOf(ctx, t, "web", rev2)
	if rc := latestReceipt(receipts, v1alpha1.GateNoDisruption, "canary"); rc == nil || rc.Spec.Result != v1alpha1.ResultPass {
		t.Errorf("the canary's noDisruption should pass: %+v", rc)
	}
	if rc := latestReceipt(receipts, v1alpha1.GateNoDisruption, "rest"); rc == nil || rc.Spec.Result != v1alpha1.ResultFail {
		t.Errorf("the last wave's noDisruption should fail: %+v", rc)
	}
	if !fr.IsRejected(rev2) {
		t.Errorf("the rolled back revision should be rejected: %+v", fr.Status.Rejected)
	}
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "v1" {
			t.Errorf("%s runs %q after the rollback, want v1", m.Name, v)
		}
	}
	// The known-good's pinned source serves an artifact again, from the emptied storage.
	var pinned sourcev1.GitRepository
	if err := s.f.Hub.Get(ctx, keyOf(s.ns, fr.Status.LastKnownGood.Source), &pinned); err != nil {
		t.Fatal(err)
	}
	if a := pinned.Status.Artifact; a == nil || a.Revision != rev1 {
		t.Errorf("the known-good's pinned source %s has artifact %+v, want %s", pinned.Name, a, rev1)
	} else if _, err := os.Stat(filepath.Join(s.f.Dir, "source-storage", a.Path)); err != nil {
		t.Errorf("the known-good's artifact was not built again: %v", err)
	}

	for _, m := range s.members {
		s.faults.ClearFaults(m.Name)
	}
	before := s.generations(t, "web")
	rev3 := s.commitVersion(t, "v3")
	fr = s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev3)
	s.converged(ctx, t, fr, before, nil, "v3")
}

func limitsContain(rc *v1alpha1.GateReceipt, part string) bool {
	for _, l := range rc.Spec.Limits {
		if strings.Contains(l, part) {
			return true
		}
	}
	return false
}

// Someone else edits the rollout's Kustomizations mid-wave. A spec field tidegate sets (spec.path,
// spec.interval) changed on the canary's is written back, as kustomize-controller corrects drift in
// what it applies. spec.suspend, which tidegate leaves to people (flux suspend kustomization), set
// on a member of the next wave holds that wave: the rollout says which Kustomization is suspended
// and how to resume it, the wave does not fail at its deadline while it waits, and once resumed
// the rollout completes, each cluster switched once.
func TestE2EFaultKustomizationEditedOrSuspended(t *testing.T) {
	parallel(t)
	s, first := newFleetSetup(t, 3, demoPackage("v1"))
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 10*time.Minute)
	defer cancel()
	s.createRollout(ctx, t, twoWaveRollout(s.ns), s.repo.Revision(first), func(fr *v1alpha1.FleetRollout) {
		fr.Spec.Waves[0].Soak.Duration = 20 * time.Second
		fr.Spec.Waves[1].Soak.Duration = soakOfTwoSamples
	})
	fr := s.rollout(t, "web")
	canary, other := fr.Status.Waves[0].Clusters[0], ""
	for _, m := range s.members {
		if m.Name != canary {
			other = m.Name
		}
	}
	before := s.generations(t, "web")
	editKustomization := func(cluster string, fn func(*kustomizev1.Kustomization)) {
		t.Helper()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ks := s.kustomization(t, "web", cluster)
			if ks == nil {
				return fmt.Errorf("no Kustomization for %s", cluster)
			}
			fn(ks)
			return s.f.Hub.Update(ctx, ks)
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	rev2 := s.commitVersion(t, "v2")
	eventually(ctx, t, canary+" switched to "+rev2, func() (bool, string) {
		ks := s.kustomization(t, "web", canary)
		return ks != nil && ks.Annotations[v1alpha1.RevisionAnnotation] == rev2, describe(s.rollout(t, "web"))
	})
	editKustomization(canary, func(ks *kustomizev1.Kustomization) {
		ks.Spec.Path = "./elsewhere"
		ks.Spec.Interval = metav1.Duration{Duration: 7 * time.Minute}
	})
	eventually(ctx, t, canary+"'s Kustomization written back", func() (bool, string) {
		ks := s.kustomization(t, "web", canary)
		return ks.Spec.Path == "./app" && ks.Spec.Interval.Duration == time.Minute, fmt.Sprintf("path %q interval %s", ks.Spec.Path, ks.Spec.Interval)
	})

	// While the canary soaks, another member's Kustomization is suspended.
	editKustomization(other, func(ks *kustomizev1.Kustomization) { ks.Spec.Suspend = true })
	var rest v1alpha1.WaveStatus
	eventually(ctx, t, "the rest wave waiting for the suspended "+other, func() (bool, string) {
		fr = s.rollout(t, "web")
		rest = fr.Status.Waves[1]
		wf := fr.Status.WaitingFor
		return rest.Phase == v1alpha1.WaveProgressing && wf != nil && wf.Wave == "rest" && wf.Until == nil &&
			strings.Contains(wf.Message, other+" is suspended") && strings.Contains(wf.Message, "flux resume kustomization "+v1alpha1.KustomizationName("web", other)), describe(fr)
	})
	// Past the wave's deadline (twice the Kustomizations' timeout, a minute, and half a second per
	// switched cluster: controllers.deadlineFor), it still waits and has failed nothing.
	waveDeadline := 2*testHealthTimeout + time.Minute + time.Duration(len(rest.Clusters))*time.Second/2
	deadline := rest.StartedAt.Add(waveDeadline + 10*time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		fr = s.rollout(t, "web")
		if fr.Status.Waves[1].Phase != v1alpha1.WaveProgressing || fr.Status.Phase != v1alpha1.PhaseProgressing {
			t.Fatalf("the wave waiting for a suspended Kustomization moved: %s", describe(fr))
		}
		time.Sleep(2 * time.Second)
	}
	if v := s.memberVersion(ctx, other); v != "v1" {
		t.Errorf("%s, suspended, runs %q: want v1", other, v)
	}

	editKustomization(other, func(ks *kustomizev1.Kustomization) { ks.Spec.Suspend = false })
	fr = s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev2)
	checkWaveOrder(t, fr)
	// The canary's Kustomization was edited once and written back once; the other's suspended and
	// resumed.
	s.converged(ctx, t, fr, before, map[string]int64{canary: 2, other: 2}, "v2")
}
