package collector

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence/availability"
	"github.com/tidegate/tidegate/fleets"
)

// background is the Collector's work apart from the reconciles: one soak loop per rollout with a
// wave soaking or rehearsing, and the evidence gathered ahead.
type background struct {
	mu      sync.Mutex
	ctx     context.Context // the loops' parent; cancelled by Stop
	cancel  context.CancelFunc
	stopped bool
	soaks   map[types.UID]*soak
	ahead   map[aheadID]*gathered
	wg      sync.WaitGroup // the loops and their gatherings
}

// soakID is what a soak loop is for: one wave of one candidate of one rollout.
type soakID struct {
	rollout   types.UID
	candidate string
	wave      string
}

// soak is one rollout's soak loop.
type soak struct {
	id     soakID
	cancel context.CancelFunc
	// gathering is set while the next wave's evidence is being gathered.
	gathering atomic.Bool

	mu   sync.Mutex
	plan soakPlan
}

// soakPlan is what the loop works from, as the latest reconcile saw it (Follow).
type soakPlan struct {
	rollout types.NamespacedName
	// candidate and wave are what the samples measure (sampleKey).
	candidate, wave string
	// sampling: the wave soaks (a rehearsing wave's noDisruption is decided: nothing to sample).
	sampling bool
	// interval is the sample interval the soak began with, kept for the whole soak.
	interval time.Duration
	// soakEnd is when the wave's soak ends; zero while it rehearses.
	soakEnd time.Time
	members []soakMember
	// next is the scope the next wave's pre-wave gates are gathered from (nil: no next wave, or its
	// members are not known), nextWave its index, gates those gates, and keys their evidenceKeys.
	next     *engine.World
	nextWave int
	gates    []string
	keys     []string
}

// soakMember is one member to sample.
type soakMember struct {
	name string
	fc   *v1alpha1.FleetCluster
	// ks is the Kustomization's resourceVersion workloads were read from.
	ks        string
	workloads []availability.Workload
}

// Follow keeps the rollout's background work in step with the status its reconcile's step left:
// while wave i soaks, its members are sampled every sample interval on the Collector's own ticker
// (the reconciles sample nothing), and while it soaks or rehearses the pre-wave gates of the wave
// after it (preWave(i+1)) are gathered ahead, within Freshness of the end of the soak. Once no wave
// soaks or rehearses (or another one does), the loop for the old one ends. Follow itself is cheap:
// it records what to do; the loop does it.
func (c *Collector) Follow(sc *engine.World, preWave func(wave int) []string) {
	fr := sc.Rollout
	i := activeWave(fr)
	if i < 0 || fr.Status.Candidate == nil {
		c.endSoak(fr.UID, "")
		return
	}
	id := soakID{rollout: fr.UID, candidate: fr.Status.Candidate.Key(), wave: fr.Status.Waves[i].Name}
	var prev soakPlan
	c.bg.mu.Lock()
	if s := c.bg.soaks[fr.UID]; s != nil && s.id == id {
		prev = s.getPlan()
	}
	c.bg.mu.Unlock()
	// Reconciles of one rollout run one at a time: nothing else changes its loop meanwhile.
	plan := c.planSoak(sc, i, preWave, prev)

	c.bg.mu.Lock()
	defer c.bg.mu.Unlock()
	c.sweepLocked()
	if c.bg.stopped {
		return
	}
	s := c.bg.soaks[fr.UID]
	if s != nil && s.id != id {
		s.cancel()
		s = nil
	}
	if s != nil {
		s.setPlan(plan)
		return
	}
	if c.bg.ctx == nil {
		c.bg.ctx, c.bg.cancel = context.WithCancel(context.Background())
	}
	if c.bg.soaks == nil {
		c.bg.soaks = map[types.UID]*soak{}
	}
	// A new loop (a restart, or the wave just started to soak) continues from what status kept.
	c.seedSoak(sc, i, plan.interval)
	ctx, cancel := context.WithCancel(c.bg.ctx)
	s = &soak{id: id, cancel: cancel, plan: plan}
	c.bg.soaks[fr.UID] = s
	c.bg.wg.Add(1)
	go c.runSoak(ctx, c.bg.ctx, s)
}

// activeWave is the index of the wave that soaks or rehearses, or -1 (also while the rollout rolls
// back: its waves keep their phases until it has rolled back, but nothing goes forward).
func activeWave(fr *v1alpha1.FleetRollout) int {
	if rollingBack(fr) {
		return -1
	}
	for i := range fr.Status.Waves {
		switch fr.Status.Waves[i].Phase {
		case v1alpha1.WaveSoaking, v1alpha1.WaveRehearsing:
			return i
		}
	}
	return -1
}

func rollingBack(fr *v1alpha1.FleetRollout) bool {
	return fr.Status.Phase == v1alpha1.PhaseRollingBack || fr.Status.Phase == v1alpha1.PhaseRolledBack
}

// planSoak builds the loop's plan from the scope: the members to sample (their workloads from their
// Kustomizations' inventories, read again only when a Kustomization changed) and the next wave's
// scope, as the step will see it when that wave is due.
func (c *Collector) planSoak(sc *engine.World, i int, preWave func(int) []string, prev soakPlan) soakPlan {
	fr := sc.Rollout
	wv := &fr.Status.Waves[i]
	plan := soakPlan{
		rollout:   types.NamespacedName{Namespace: fr.Namespace, Name: fr.Name},
		candidate: fr.Status.Candidate.Key(),
		wave:      wv.Name,
		sampling:  wv.Phase == v1alpha1.WaveSoaking,
		interval:  sc.Settings.SampleInterval,
		nextWave:  -1,
	}
	if prev.interval > 0 {
		// The loop of this soak goes on at the interval it began with (waveSampler).
		plan.interval = prev.interval
	}
	if plan.sampling && wv.ReadyAt != nil {
		plan.soakEnd = wv.ReadyAt.Add(engine.WaveSoak(fr.WaveSpec(wv.Name), sc.Settings))
	}
	known := make(map[string]soakMember, len(prev.members))
	for _, m := range prev.members {
		known[m.name] = m
	}
	for _, name := range wv.Clusters {
		fc, ks := sc.Clusters[name], sc.Objects[name]
		if fc == nil || ks == nil {
			continue // a missing member has no samples, and its evidence says so
		}
		m := soakMember{name: name, fc: fc, ks: ks.GetResourceVersion()}
		if k, ok := known[name]; ok && k.ks == m.ks {
			m.workloads = k.workloads
		} else {
			m.workloads = workloadsOf(ks)
		}
		plan.members = append(plan.members, m)
	}
	if j := i + 1; j < len(fr.Status.Waves) && fr.Status.Waves[j].Phase == v1alpha1.WavePending && preWave != nil {
		if next := nextWaveScope(sc, j); next != nil {
			plan.next, plan.nextWave, plan.gates = next, j, preWave(j)
			for _, g := range plan.gates {
				plan.keys = append(plan.keys, evidenceKey(next, g, j))
			}
		}
	}
	return plan
}

// workloadsOf are the objects of the member's inventory (a Kustomization's or a HelmRelease's:
// engine.MemberInventory) the member is sampled on: its apps workloads, and the objects of the kinds
// its healthCheckExprs judge, by the expressions the member carries (kustomize-controller's, copied
// from the rollout's template).
func workloadsOf(member client.Object) []availability.Workload {
	inv, exprs := engine.MemberInventory(member)
	// Entries that do not parse are left out: a workload among them is not sampled, and the
	// summary says the cluster had fewer workloads.
	ws, _ := availability.WorkloadsFromInventory(inv, exprs...)
	return ws
}

// nextWaveScope is the scope wave j's pre-wave gates will be decided over: the rollout as it is,
// with wave j's members snapshotted as the step will snapshot them from today's inventory.
func nextWaveScope(sc *engine.World, j int) *engine.World {
	fr := sc.Rollout
	members, err := fleets.Members(fleets.Input{Rollout: fr, Inventory: sc.Inventory}, fr.Status.Waves[:j], fr.Status.Waves[j].Name)
	if err != nil {
		return nil
	}
	next := *sc
	next.Rollout = fr.DeepCopy()
	next.Rollout.Status.Waves[j].Clusters = members
	next.Objects, next.Kustomizations = nil, nil
	return &next
}

func (s *soak) getPlan() soakPlan {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.plan
}

func (s *soak) setPlan(p soakPlan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.plan = p
}

// runSoak is one rollout's soak loop: a sampling pass at once and then every sample interval,
// gathering the next wave's evidence ahead when it is due, until the rollout moves on or ctx ends.
// A gathering runs within bg, not ctx: the soak's end is when its result is wanted.
func (c *Collector) runSoak(ctx, bg context.Context, s *soak) {
	defer c.bg.wg.Done()
	gone := false
	defer func() { c.soakEnded(s, gone) }()
	plan := s.getPlan()
	interval := plan.interval
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	clients := map[string]*memberClient{}
	for {
		var soaking bool
		if soaking, gone = c.stillSoaking(ctx, plan, s.id); !soaking {
			return
		}
		if plan.sampling {
			c.samplePass(ctx, plan, clients)
		}
		if c.dueToGather(plan) && s.gathering.CompareAndSwap(false, true) {
			c.bg.wg.Add(1)
			go func(plan soakPlan) {
				defer c.bg.wg.Done()
				defer s.gathering.Store(false)
				c.gatherAhead(bg, s.id, plan)
			}(plan)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		plan = s.getPlan()
		if plan.interval != interval {
			interval = plan.interval
			ticker.Reset(interval)
		}
	}
}

// stillSoaking says whether the rollout, as the cache shows it, still has this wave of this candidate
// soaking or rehearsing, and whether the rollout is gone (deleted, or replaced by another of its
// name). A wave the cache still shows Progressing is taken as soaking: the status that says it soaks
// may not have reached the cache yet. A rollout that cannot be read is taken as unchanged.
func (c *Collector) stillSoaking(ctx context.Context, plan soakPlan, id soakID) (soaking, gone bool) {
	if ctx.Err() != nil {
		return false, false
	}
	if c.Rollouts == nil {
		return true, false
	}
	var fr v1alpha1.FleetRollout
	if err := c.Rollouts.Get(ctx, plan.rollout, &fr); err != nil {
		return !apierrors.IsNotFound(err), apierrors.IsNotFound(err)
	}
	if fr.UID != id.rollout || !fr.DeletionTimestamp.IsZero() {
		return false, true
	}
	if fr.Spec.Suspend || rollingBack(&fr) || fr.Status.Candidate == nil || fr.Status.Candidate.Key() != id.candidate {
		return false, false
	}
	for _, wv := range fr.Status.Waves {
		if wv.Name == id.wave {
			switch wv.Phase {
			case v1alpha1.WaveSoaking, v1alpha1.WaveRehearsing, v1alpha1.WaveProgressing:
				return true, false
			}
			return false, false
		}
	}
	return false, false
}

// memberClient is one member's client in a soak loop, asked for once and again after a failed read
// (its kubeconfig may have changed), and whether its last sample failed.
type memberClient struct {
	fc     *v1alpha1.FleetCluster
	reader client.Reader
	failed bool
}

// samplePass takes one sample of every member of the plan within the sample interval. The members
// whose last sample failed go last: a few slow members then cost the others no turn.
func (c *Collector) samplePass(ctx context.Context, plan soakPlan, clients map[string]*memberClient) availability.PassResult {
	byKey := make(map[string]*memberClient, len(plan.members))
	members := make([]availability.Member, 0, len(plan.members))
	var late []availability.Member
	for _, m := range plan.members {
		mc := clients[m.name]
		if mc == nil || mc.fc.UID != m.fc.UID || mc.fc.Generation != m.fc.Generation {
			mc = &memberClient{fc: m.fc}
			clients[m.name] = mc
		}
		key := sampleKeyOf(plan.rollout, plan.candidate, plan.wave, m.name)
		byKey[key] = mc
		am := availability.Member{Cluster: key, Workloads: m.workloads, Reader: func(ctx context.Context) (client.Reader, error) {
			if mc.reader != nil {
				return mc.reader, nil
			}
			r, err := c.Members.Client(ctx, mc.fc)
			if err != nil {
				return nil, err
			}
			mc.reader = r
			return r, nil
		}}
		if mc.failed {
			late = append(late, am)
		} else {
			members = append(members, am)
		}
	}
	members = append(members, late...)
	res := c.samples(plan.interval).ObservePass(ctx, members, availability.PassOptions{
		Parallel: c.SampleParallel, Budget: plan.interval, Now: c.now,
	})
	for _, mc := range byKey {
		mc.failed = false
	}
	for _, key := range res.Failed {
		if mc := byKey[key]; mc != nil {
			mc.failed = true
			if !slices.Contains(res.NotReached, key) {
				mc.reader = nil
			}
		}
	}
	if len(res.Failed) > 0 {
		log.FromContext(ctx).V(1).Info("availability samples with failed reads", "rollout", plan.rollout.String(),
			"members", len(members), "failed", len(res.Failed), "notReached", len(res.NotReached), "memberDeadline", res.MemberTimeout.String())
	}
	return res
}

// endSoak ends the rollout's soak loop, if it is for wave (any wave when wave is "").
func (c *Collector) endSoak(rollout types.UID, wave string) {
	c.bg.mu.Lock()
	defer c.bg.mu.Unlock()
	if s := c.bg.soaks[rollout]; s != nil && (wave == "" || s.id.wave == wave) {
		s.cancel()
		delete(c.bg.soaks, rollout)
	}
}

// soakEnded cleans up after a loop: its members' samples go (but those a newer loop of the same
// rollout samples), and when its rollout is gone, so does the evidence gathered ahead for it.
func (c *Collector) soakEnded(s *soak, gone bool) {
	s.cancel()
	plan := s.getPlan()
	c.bg.mu.Lock()
	newer := c.bg.soaks[s.id.rollout]
	if newer == s {
		delete(c.bg.soaks, s.id.rollout)
		newer = nil
	}
	if gone {
		for id := range c.bg.ahead {
			if id.rollout == s.id.rollout {
				delete(c.bg.ahead, id)
			}
		}
	}
	c.bg.mu.Unlock()
	kept := map[string]bool{}
	if newer != nil {
		next := newer.getPlan()
		for _, m := range next.members {
			kept[sampleKeyOf(next.rollout, next.candidate, next.wave, m.name)] = true
		}
	}
	sampler := c.samples(plan.interval)
	for _, m := range plan.members {
		if key := sampleKeyOf(plan.rollout, plan.candidate, plan.wave, m.name); !kept[key] {
			sampler.Forget(key)
		}
	}
}

// Start implements manager.Runnable: the background work lives until ctx ends (the manager stops,
// or this replica loses its leadership), then Stop ends it.
func (c *Collector) Start(ctx context.Context) error {
	<-ctx.Done()
	c.Stop()
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the leader reconciles, so only
// it samples and gathers.
func (c *Collector) NeedLeaderElection() bool { return true }

// Stop ends every soak loop and gathering and waits for them; Follow starts none afterwards.
func (c *Collector) Stop() {
	c.bg.mu.Lock()
	c.bg.stopped = true
	if c.bg.cancel != nil {
		c.bg.cancel()
	}
	c.bg.mu.Unlock()
	c.bg.wg.Wait()
}

// Soaked summarises, for the rollout's status, the samples of wave i's members since the wave was
// Ready: what a restart continues the soak from (seedSoak). Members held back, and members not
// sampled yet, have no entry.
func (c *Collector) Soaked(sc *engine.World, i int) []v1alpha1.SoakSamples {
	fr := sc.Rollout
	wv := &fr.Status.Waves[i]
	if wv.ReadyAt == nil {
		return nil
	}
	held := make(map[string]bool, len(wv.HeldBack))
	for _, h := range wv.HeldBack {
		held[h.Cluster] = true
	}
	sampler := c.waveSampler(sc, i)
	out := make([]v1alpha1.SoakSamples, 0, len(wv.Clusters))
	for _, name := range wv.Clusters {
		if held[name] {
			continue
		}
		s := sampler.Summary(sampleKey(fr, wv.Name, name), wv.ReadyAt.Time, sc.Now)
		if s.Samples == 0 {
			continue
		}
		out = append(out, v1alpha1.SoakSamples{
			Cluster: name, Samples: int32(s.Samples), Failed: int32(s.FailedSamples), Observed: int32(s.Observed),
			MinAvailablePermille: int32(math.Floor(s.MinAvailableRatio * 1000)),
			UnavailableSeconds:   int32(math.Ceil(s.UnavailableSeconds)),
			First:                metav1.NewTime(s.FirstSample.Truncate(time.Second)),
			Last:                 metav1.NewTime(s.LastSample.Truncate(time.Second)),
			LastBelow:            s.LastBelow, LastFailed: s.LastFailed,
		})
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// seedSoak starts the samples of wave i's members, at the soak's sample interval, from what the
// rollout's status kept of them (Soaked), for members the collector has no samples of: after a restart the soak continues, and a
// disruption seen before it is remembered.
func (c *Collector) seedSoak(sc *engine.World, i int, interval time.Duration) {
	fr := sc.Rollout
	sampler := c.samples(interval)
	wave := fr.Status.Waves[i].Name
	for _, e := range fr.Status.Waves[i].Soaked {
		sampler.Seed(sampleKey(fr, wave, e.Cluster), availability.Seed{
			Samples: int(e.Samples), Failed: int(e.Failed), Observed: int(e.Observed),
			MinRatio: float64(e.MinAvailablePermille) / 1000, Unavailable: time.Duration(e.UnavailableSeconds) * time.Second,
			First: e.First.Time, Last: e.Last.Time, LastBelow: e.LastBelow, LastFailed: e.LastFailed,
		})
	}
}
