package collector

import (
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/verdict"
)

// answered keeps, for a deploySafe that could not observe some of its wave's clusters, the
// preflight results of the clusters that did answer, so that the decisions that follow while the
// gate waits on the others ask only those again: one member that does not answer costs a dry-run of
// that member per decision, not of the fleet. An answer is used for the same question only
// (evidenceKey: the rollout's generation, candidate, known-good, wave, members and settings), from
// the same FleetCluster at the same generation, and within Freshness of when it was given.
type answered struct {
	mu sync.Mutex
	// by question (evidenceKey), by cluster.
	by map[string]map[string]answer
}

// answer is one cluster's preflight result and when it was checked.
type answer struct {
	result     verdict.ClusterPreflight
	at         time.Time
	uid        types.UID
	generation int64
}

// recheck is the preflight of names (the wave's own targets first, n of them, then the later
// waves'), in order: check asks the clusters it is given, and the answers kept for question key are
// used for the others. It keeps this decision's answers when one of the wave's own targets did not
// answer (the gate will be Inconclusive and decided again), and forgets the question when all did.
// reused is how many results were taken from earlier checks, the oldest checked at oldest.
func (c *Collector) recheck(sc *engine.World, key string, names []string, n int, check func([]string) []verdict.ClusterPreflight) (results []verdict.ClusterPreflight, reused int, oldest time.Time) {
	now := sc.Now
	identity := func(name string) (types.UID, int64) {
		if fc := sc.Clusters[name]; fc != nil {
			return fc.UID, fc.Generation
		}
		return "", 0
	}
	c.answered.mu.Lock()
	kept := c.answered.by[key]
	c.answered.mu.Unlock()

	results = make([]verdict.ClusterPreflight, len(names))
	earlier := make([]bool, len(names))
	var ask []string
	var at []int
	for i, name := range names {
		a, ok := kept[name]
		uid, gen := identity(name)
		if ok && a.result.Reachable && a.uid == uid && a.generation == gen && now.Sub(a.at) >= 0 && now.Sub(a.at) <= c.freshness() {
			results[i], earlier[i] = a.result, true
			reused++
			if oldest.IsZero() || a.at.Before(oldest) {
				oldest = a.at
			}
			continue
		}
		ask, at = append(ask, name), append(at, i)
	}
	if len(ask) > 0 {
		for k, r := range check(ask) {
			results[at[k]] = r
		}
	}

	waiting := false
	for _, r := range results[:n] {
		waiting = waiting || !r.Reachable
	}
	c.answered.mu.Lock()
	defer c.answered.mu.Unlock()
	c.sweepAnsweredLocked(now)
	if !waiting {
		delete(c.answered.by, key)
		return results, reused, oldest
	}
	next := make(map[string]answer, len(results))
	for i, r := range results {
		if !r.Reachable {
			continue
		}
		if earlier[i] {
			next[names[i]] = kept[names[i]] // used again: it keeps the time it was given
			continue
		}
		uid, gen := identity(names[i])
		next[names[i]] = answer{result: r, at: now, uid: uid, generation: gen}
	}
	if c.answered.by == nil {
		c.answered.by = map[string]map[string]answer{}
	}
	c.answered.by[key] = next
	return results, reused, oldest
}

// sweepAnsweredLocked forgets questions none of whose answers may be used any more.
func (c *Collector) sweepAnsweredLocked(now time.Time) {
	for key, byCluster := range c.answered.by {
		fresh := false
		for _, a := range byCluster {
			fresh = fresh || now.Sub(a.at) <= c.freshness()
		}
		if !fresh {
			delete(c.answered.by, key)
		}
	}
}

// reusedLimit is the limit a deploySafe's evidence states when reused of its total preflight
// results come from earlier decisions of the gate, the oldest checked at oldest.
func (c *Collector) reusedLimit(reused, total int, oldest, now time.Time) string {
	return fmt.Sprintf("%d of the %d clusters' preflight results were checked at an earlier decision of this gate (the oldest at %s, %s before this one) and not asked again: while the gate waits on clusters it could not observe, only those are asked, and an answer is used within %s of it",
		reused, total, oldest.UTC().Format(time.RFC3339), now.Sub(oldest).Round(time.Second), c.freshness())
}
