package fleets

import (
	"errors"
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// AllWave is the name of the single wave of a rollout whose spec lists no waves.
const AllWave = "all"

// Input is everything Plan reads: the rollout and the inventory of its namespace.
type Input struct {
	// Rollout whose spec (clusterSelector, waves, class, owner) and name are planned. Required.
	Rollout *v1alpha1.FleetRollout
	// Inventory of the rollout's namespace, in any order.
	Inventory Inventory
}

// WavePlan is the outcome of Plan.
type WavePlan struct {
	// Rollout is "<namespace>/<name>" of the planned rollout.
	Rollout string
	// Hash of the spec fields the plan was made from (see Hash).
	Hash string
	// Waves in spec order; every eligible cluster is in exactly one.
	Waves []PlannedWave
	// Eligible are the clusters the rollout reaches, sorted by name.
	Eligible []string
	// Skipped are the clusters the clusterSelector matched but the rollout does not reach, sorted by name.
	Skipped []Skip
	// Notes explain the plan to people (empty waves, rounding, leftovers, skips), in a stable order.
	Notes []string
}

// PlannedWave is one wave of the plan.
type PlannedWave struct {
	// Name of the wave, as in spec.waves (or AllWave).
	Name string
	// Clusters of the wave, sorted by name. May be empty.
	Clusters []string
}

// SkipCause classifies why an eligible-looking cluster is skipped, for counting and conditions.
type SkipCause string

// Causes of a skip, in the order they are checked: the most lasting one is reported.
const (
	SkipNoOptIn   SkipCause = "NoOptIn"
	SkipSuspended SkipCause = "Suspended"
)

// Skip is a cluster the clusterSelector matched that the rollout does not reach.
type Skip struct {
	// Cluster is the FleetCluster's name.
	Cluster string
	// Cause of the skip.
	Cause SkipCause
	// Reason for people, as written to status.skipped.
	Reason string
}

// SpecError is a FleetRollout spec the planner cannot plan. Only the user can fix it, so the engine
// should stall (no retry) rather than requeue; find it with errors.As.
type SpecError struct {
	// Rollout is "<namespace>/<name>".
	Rollout string
	// Wave is the wave at fault, empty for rollout-level fields.
	Wave string
	// Field is the path of the offending field, e.g. spec.waves[1].selector.
	Field string
	// Err is what is wrong.
	Err error
	// Fix says what to change.
	Fix string
}

func (e *SpecError) Error() string {
	where := fmt.Sprintf("rollout %q", e.Rollout)
	if e.Wave != "" {
		where += fmt.Sprintf(" wave %q", e.Wave)
	}
	return fmt.Sprintf("%s: %s: %v; %s", where, e.Field, e.Err, e.Fix)
}

func (e *SpecError) Unwrap() error { return e.Err }

// Plan assigns the rollout's eligible clusters to its waves.
//
// The members of the waves that started for the candidate in flight (Recorded) stay eligible, and
// candidates, whatever they became since: a member that became unreachable, was suspended or was
// deselected mid-rollout keeps its place, so the plan of the other clusters does not shift.
//
// Candidates are the inventory clusters the clusterSelector matches (nil selects all), in name order.
// Candidates without an opt-in to a SystemConfiguration rollout and suspended ones are skipped with a
// reason; the rest are eligible. An unreachable cluster is planned in its wave like any other: that
// wave's deploySafe preflight cannot observe it, so the wave holds Inconclusive until it answers or
// the policy's inconclusiveAfter decides, on record. Skipping it would let the rollout complete
// without it, and switch it later with no gate. Each wave, in
// spec order, takes from the eligible clusters no earlier wave took those its selector matches (nil
// matches all), in name order, capped by count or by ceil(percent × eligible / 100). Eligible clusters
// no wave took join the last wave. No waves in the spec plans one wave, "all". Empty waves are kept.
//
// Plan returns a *SpecError naming the rollout, the wave and the fix when the spec cannot be planned
// (invalid selector, duplicate or empty wave name, count < 1, percent outside 1..100, count and
// percent both set), and a plain error when the inventory repeats a cluster name. Plan is deterministic
// and independent of the inventory's order.
func Plan(in Input) (WavePlan, error) {
	p, err := plan(in)
	if err != nil {
		return WavePlan{}, err
	}
	return p.WavePlan, nil
}

// planned is a plan together with what it was made from, for Members to pick from again.
type planned struct {
	WavePlan
	waves    []wave
	eligible []Cluster // sorted by name
}

func plan(in Input) (*planned, error) {
	r := in.Rollout
	if r == nil {
		return nil, errors.New("planning waves: no FleetRollout given; pass the rollout to plan")
	}
	ref := rolloutRef(r)
	clusterSel, err := selectorFor(r.Spec.ClusterSelector)
	if err != nil {
		return nil, &SpecError{Rollout: ref, Field: "spec.clusterSelector", Err: err,
			Fix: "fix the label selector in the FleetRollout"}
	}
	waves, err := compileWaves(ref, r.Spec.Waves)
	if err != nil {
		return nil, err
	}
	kept := Recorded(r)
	candidates, err := sortedCandidates(ref, in.Inventory, clusterSel, kept)
	if err != nil {
		return nil, err
	}

	p := &planned{WavePlan: WavePlan{Rollout: ref, Hash: Hash(&r.Spec)}, waves: waves}
	for _, c := range candidates {
		if _, ok := kept[c.Name]; ok {
			// A member of a started wave stays eligible whatever it became since (unreachable,
			// suspended, deselected): its wave keeps it and counts it, and no other cluster takes
			// its place in the plan.
			p.eligible = append(p.eligible, c)
			p.Eligible = append(p.Eligible, c.Name)
			continue
		}
		if s, skipped := skipOf(r, c); skipped {
			p.Skipped = append(p.Skipped, s)
			continue
		}
		p.eligible = append(p.eligible, c)
		p.Eligible = append(p.Eligible, c.Name)
	}

	if len(r.Spec.Waves) == 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("spec.waves is empty: one wave %q takes every eligible cluster", AllWave))
	}
	p.Waves, p.Notes = assign(waves, p.eligible, p.Notes)
	p.Notes = append(p.Notes, skipNotes(r, p.Skipped)...)
	if len(p.eligible) == 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("no cluster is eligible: the clusterSelector matched %d of the %s in the inventory and %d of those are skipped",
			len(candidates), plural(len(in.Inventory), "cluster"), len(p.Skipped)))
	}
	return p, nil
}

// wave is a spec wave with its selector parsed.
type wave struct {
	name     string
	selector labels.Selector
	count    *int32
	percent  *int32
}

// limit is the most clusters the wave may take of total eligible ones, or -1 for no cap.
func (w wave) limit(total int) int {
	switch {
	case w.count != nil:
		return int(*w.count)
	case w.percent != nil:
		// Rounded up so a small percent of a small fleet still takes one cluster: a canary of 0 would
		// let the next wave go without any evidence. percent ≥ 1 makes this ≥ 1 whenever total ≥ 1.
		return (int(*w.percent)*total + 99) / 100
	default:
		return -1
	}
}

// pick takes, in order, the clusters not yet taken that the wave's selector matches, up to limit
// (-1: no cap), and marks them taken. It never returns nil so an empty wave encodes as [].
func (w wave) pick(pool []Cluster, taken []bool, limit int) []string {
	members := []string{}
	for j, c := range pool {
		if limit >= 0 && len(members) >= limit {
			break
		}
		if taken[j] || !w.selector.Matches(labels.Set(c.Labels)) {
			continue
		}
		taken[j] = true
		members = append(members, c.Name)
	}
	return members
}

// compileWaves validates the spec's waves and parses their selectors. CEL admission rejects most of
// these already; the planner checks again because it also plans specs read from files (CLI, tests)
// and a wrong plan is worse than a stalled rollout.
func compileWaves(ref string, specWaves []v1alpha1.Wave) ([]wave, error) {
	if len(specWaves) == 0 {
		return []wave{{name: AllWave, selector: labels.Everything()}}, nil
	}
	seen := make(map[string]int, len(specWaves))
	out := make([]wave, 0, len(specWaves))
	for i, w := range specWaves {
		field := fmt.Sprintf("spec.waves[%d]", i)
		fail := func(sub string, err error, fix string) error {
			return &SpecError{Rollout: ref, Wave: w.Name, Field: field + sub, Err: err, Fix: fix}
		}
		if w.Name == "" {
			return nil, fail(".name", errors.New("name is empty"), "give every wave a name")
		}
		if j, dup := seen[w.Name]; dup {
			return nil, fail(".name", fmt.Errorf("name is also used by spec.waves[%d]", j), "give every wave a unique name")
		}
		seen[w.Name] = i
		sel, err := selectorFor(w.Selector)
		if err != nil {
			return nil, fail(".selector", err, "fix the label selector in the FleetRollout")
		}
		if w.Count != nil && w.Percent != nil {
			return nil, fail("", errors.New("count and percent are both set"), "set count or percent, not both")
		}
		if w.Count != nil && *w.Count < 1 {
			return nil, fail(".count", fmt.Errorf("count %d is less than 1", *w.Count), "set count to 1 or more, or remove it")
		}
		if w.Percent != nil && (*w.Percent < 1 || *w.Percent > 100) {
			return nil, fail(".percent", fmt.Errorf("percent %d is outside 1..100", *w.Percent), "set percent between 1 and 100")
		}
		out = append(out, wave{name: w.Name, selector: sel, count: w.Count, percent: w.Percent})
	}
	return out, nil
}

// selectorFor parses a label selector where nil, like {}, selects everything. metav1's own conversion
// turns nil into Nothing, which would silently plan an empty rollout.
func selectorFor(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

// sortedCandidates returns the inventory's clusters the clusterSelector matches, and those kept
// whatever it matches, sorted by name.
func sortedCandidates(ref string, inv Inventory, sel labels.Selector, kept map[string]struct{}) ([]Cluster, error) {
	seen := make(map[string]struct{}, len(inv))
	var out []Cluster
	for _, c := range inv {
		if _, dup := seen[c.Name]; dup {
			// Picking either copy would make the plan depend on list order.
			return nil, fmt.Errorf("planning rollout %q: the inventory lists FleetCluster %q twice; build it from the FleetClusters of the rollout's namespace only", ref, c.Name)
		}
		seen[c.Name] = struct{}{}
		if _, ok := kept[c.Name]; ok || sel.Matches(labels.Set(c.Labels)) {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// skipOf tells whether a candidate is skipped, and why. The checks run from the most lasting cause to
// the most passing one so the reason shown is the one the cluster's owner must act on first.
func skipOf(r *v1alpha1.FleetRollout, c Cluster) (Skip, bool) {
	switch {
	case r.Spec.Class == v1alpha1.ClassSystemConfiguration && !optedIn(r, c):
		return Skip{Cluster: c.Name, Cause: SkipNoOptIn,
			Reason: "no opt-in for SystemConfiguration rollout " + r.Name}, true
	case c.Suspended:
		return Skip{Cluster: c.Name, Cause: SkipSuspended,
			Reason: "cluster is suspended (spec.suspend)"}, true
	}
	return Skip{}, false
}

// optedIn tells whether the cluster accepts the SystemConfiguration rollout, by its name or by its
// owner. An empty owner never matches "/*": permission is never inferred from a missing field.
func optedIn(r *v1alpha1.FleetRollout, c Cluster) bool {
	for _, o := range c.OptIns {
		if o == r.Name || (r.Spec.Owner != "" && o == r.Spec.Owner+"/*") {
			return true
		}
	}
	return false
}

// assign fills the waves from the eligible clusters (sorted by name) and appends notes.
func assign(waves []wave, eligible []Cluster, notes []string) ([]PlannedWave, []string) {
	total := len(eligible)
	taken := make([]bool, total)
	out := make([]PlannedWave, len(waves))
	for i, w := range waves {
		limit := w.limit(total)
		if w.percent != nil {
			notes = append(notes, fmt.Sprintf("wave %q: %d%% of %s, rounded up, caps it at %d",
				w.name, *w.percent, plural(total, "eligible cluster"), limit))
		}
		out[i] = PlannedWave{Name: w.name, Clusters: w.pick(eligible, taken, limit)}
	}

	last := &out[len(out)-1]
	var leftovers int
	for j, c := range eligible {
		if !taken[j] {
			last.Clusters = append(last.Clusters, c.Name)
			leftovers++
		}
	}
	if leftovers > 0 {
		sort.Strings(last.Clusters)
		notes = append(notes, fmt.Sprintf("%s no wave selected joined the last wave %q", plural(leftovers, "cluster"), last.Name))
	}

	for _, w := range out {
		if len(w.Clusters) > 0 {
			continue
		}
		why := "no eligible cluster left by earlier waves matches its selector"
		if total == 0 {
			why = "no cluster is eligible"
		}
		notes = append(notes, fmt.Sprintf("wave %q is empty: %s; it is kept so wave names stay stable", w.Name, why))
	}
	return out, notes
}

// skipNotes summarises the skips once per cause, with what would bring the clusters in.
func skipNotes(r *v1alpha1.FleetRollout, skipped []Skip) []string {
	counts := map[SkipCause]int{}
	for _, s := range skipped {
		counts[s.Cause]++
	}
	var notes []string
	if n := counts[SkipNoOptIn]; n > 0 {
		how := fmt.Sprintf("%q", r.Name)
		if r.Spec.Owner != "" {
			how += fmt.Sprintf(" or %q", r.Spec.Owner+"/*")
		}
		notes = append(notes, fmt.Sprintf("%s skipped: no opt-in for SystemConfiguration rollout %s; a cluster opts in with %s in spec.optIns",
			plural(n, "cluster"), r.Name, how))
	}
	if n := counts[SkipSuspended]; n > 0 {
		notes = append(notes, fmt.Sprintf("%s skipped: suspended; clear spec.suspend on the FleetCluster to include it", plural(n, "cluster")))
	}
	return notes
}

func rolloutRef(r *v1alpha1.FleetRollout) string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
