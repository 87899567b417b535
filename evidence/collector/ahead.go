package collector

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/verdict"
)

// DefaultFreshness bounds how old evidence gathered ahead may be when a gate uses it: about the time
// one gate's collection may take (Timeout), so that what a gate judges is never much older than
// evidence collected at the decision would be.
const DefaultFreshness = 2 * time.Minute

// aheadID names the evidence gathered ahead for one gate of one rollout.
type aheadID struct {
	rollout types.UID
	gate    string
}

// gathered is one gate's evidence gathered ahead.
type gathered struct {
	// key is what it was gathered for (evidenceKey).
	key string
	// during is the wave that soaked while it was gathered.
	during string
	// at is when it was collected (its evidence's collectedAt).
	at time.Time
	// done is closed once out and err are set.
	done chan struct{}
	out  Collected
	err  error
}

func (g *gathered) finished() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// evidenceKey identifies what a gate's evidence for wave i is about: the gate, the wave and its
// targets (with each target's FleetCluster identity and generation: its kubeconfig and values), the
// rollout and its generation (its spec: template, approvals), its candidate and known-good, the states
// of their pinned sources (served revision, digest, verification), the wave's rehearsal and the
// policy's settings. Evidence gathered ahead is used only for the same key.
func evidenceKey(sc *engine.World, gate string, i int) string {
	fr := sc.Rollout
	wv := &fr.Status.Waves[i]
	type member struct {
		Name       string
		UID        types.UID
		Generation int64
	}
	members := make([]member, 0, len(wv.Clusters))
	for _, name := range slices.Sorted(slices.Values(wv.Clusters)) {
		m := member{Name: name}
		if fc := sc.Clusters[name]; fc != nil {
			m.UID, m.Generation = fc.UID, fc.Generation
		}
		members = append(members, m)
	}
	source := func(s engine.SourceState) engine.SourceState {
		s.Message = "" // wording, not state
		return s
	}
	b, err := json.Marshal(struct {
		Gate, Wave                 string
		Members                    []member
		Rollout                    types.UID
		Generation                 int64
		Candidate, KnownGood       *v1alpha1.RevisionStatus
		CandidateSrc, KnownGoodSrc engine.SourceState
		Rehearsal                  *v1alpha1.RehearsalStatus
		Settings                   verdict.Settings
	}{gate, wv.Name, members, fr.UID, fr.Generation, fr.Status.Candidate, fr.Status.LastKnownGood,
		source(sc.Candidate), source(sc.KnownGood), wv.Rehearsal, sc.Settings})
	if err != nil {
		// Nothing above fails to encode; a key nothing matches only costs a collection.
		return "unencodable: " + err.Error()
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (c *Collector) freshness() time.Duration {
	if c.Freshness > 0 {
		return c.Freshness
	}
	return DefaultFreshness
}

// gatheredAhead returns the evidence gathered ahead for gate of wave i when it was gathered for
// exactly this scope (evidenceKey) and is at most Freshness old, waiting within ctx for a gathering
// still under way. It is used once: a later decision collects anew.
func (c *Collector) gatheredAhead(ctx context.Context, sc *engine.World, gate string, i int) (Collected, bool) {
	id := aheadID{rollout: sc.Rollout.UID, gate: gate}
	c.bg.mu.Lock()
	c.sweepLocked()
	g := c.bg.ahead[id]
	c.bg.mu.Unlock()
	if g == nil || g.key != evidenceKey(sc, gate, i) {
		return Collected{}, false
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		return Collected{}, false
	}
	c.bg.mu.Lock()
	if c.bg.ahead[id] == g {
		delete(c.bg.ahead, id)
	}
	c.bg.mu.Unlock()
	age := c.now().Sub(g.at)
	if g.err != nil || age < 0 || age > c.freshness() {
		return Collected{}, false
	}
	line := fmt.Sprintf("gathered ahead at %s while wave %s soaked, %s before this decision, and used because evidence gathered ahead is used within %s of its collection: what changed on the clusters and sources after it was collected is not seen",
		g.at.UTC().Format(time.RFC3339), g.during, age.Round(time.Second), c.freshness())
	out := g.out
	out.Evidence = withLimit(out.Evidence, line)
	return out, true
}

// withLimit returns a copy of ev with one more limit (ev's own limits are not touched).
func withLimit(ev any, line string) any {
	switch e := ev.(type) {
	case verdict.DeploySafeEvidence:
		return appendLimit(&e, &e.Evidence, line)
	case verdict.RollbackSafeEvidence:
		return appendLimit(&e, &e.Evidence, line)
	case verdict.RollbackSucceedsEvidence:
		return appendLimit(&e, &e.Evidence, line)
	case verdict.NoDisruptionEvidence:
		return appendLimit(&e, &e.Evidence, line)
	}
	return ev
}

// appendLimit adds line to base, the Evidence embedded in *e, and returns *e.
func appendLimit[E any](e *E, base *verdict.Evidence, line string) E {
	base.Limits = append(slices.Clip(base.Limits), line)
	return *e
}

// dueToGather says whether the next wave's evidence should be gathered now: there is a next wave,
// the soak ends within half the freshness bound (a rehearsal's end is not known: always), and some
// gate's evidence is missing, for another key, failed, or half as old as the bound.
func (c *Collector) dueToGather(plan soakPlan) bool {
	if plan.next == nil || len(plan.gates) == 0 {
		return false
	}
	now, half := c.now(), c.freshness()/2
	if !plan.soakEnd.IsZero() && plan.soakEnd.Sub(now) > half {
		return false
	}
	c.bg.mu.Lock()
	defer c.bg.mu.Unlock()
	for k, gate := range plan.gates {
		g := c.bg.ahead[aheadID{rollout: plan.next.Rollout.UID, gate: gate}]
		if g == nil || g.key != plan.keys[k] || (g.finished() && (g.err != nil || now.Sub(g.at) >= half)) {
			return true
		}
	}
	return false
}

// gatherAhead collects the next wave's pre-wave gates' evidence, all at once, each within Timeout,
// and keeps it for Collect. Each gate's entry is in place before its collection starts, so a decision
// that comes meanwhile waits for it.
func (c *Collector) gatherAhead(ctx context.Context, id soakID, plan soakPlan) {
	sc := *plan.next
	sc.Now = c.now()
	var wg sync.WaitGroup
	for k, gate := range plan.gates {
		g := &gathered{key: plan.keys[k], during: id.wave, at: sc.Now.UTC().Truncate(time.Second), done: make(chan struct{})}
		c.bg.mu.Lock()
		if c.bg.ahead == nil {
			c.bg.ahead = map[aheadID]*gathered{}
		}
		c.bg.ahead[aheadID{rollout: id.rollout, gate: gate}] = g
		c.bg.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(g.done)
			gctx, cancel := context.WithTimeout(ctx, Timeout)
			defer cancel()
			g.out, g.err = c.collect(gctx, &sc, gate, plan.nextWave)
		}()
	}
	wg.Wait()
}

// sweepLocked drops evidence gathered ahead that is too old to be used. c.bg.mu is held.
func (c *Collector) sweepLocked() {
	now := c.now()
	for id, g := range c.bg.ahead {
		if g.finished() && now.Sub(g.at) > c.freshness() {
			delete(c.bg.ahead, id)
		}
	}
}
