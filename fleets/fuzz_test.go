package fleets

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// choices turns fuzz input into choices; past the end it answers 0, so every input is a valid world.
type choices struct {
	b []byte
	i int
}

func (s *choices) intn(n int) int {
	if s.i >= len(s.b) {
		return 0
	}
	v := s.b[s.i]
	s.i++
	return int(v) % n
}

func (s *choices) pick(opts ...string) string { return opts[s.intn(len(opts))] }

func genSelector(s *choices) *metav1.LabelSelector {
	switch s.intn(7) {
	case 0:
		return nil
	case 1:
		return &metav1.LabelSelector{}
	case 2:
		return sel("region", s.pick("eu", "us", "ap"))
	case 3:
		op := metav1.LabelSelectorOpIn
		if s.intn(2) == 1 {
			op = metav1.LabelSelectorOpNotIn
		}
		return expr(s.pick("region", "env"), op, s.pick("eu", "prod"), s.pick("us", "stage", "ap"))
	case 4:
		op := metav1.LabelSelectorOpExists
		if s.intn(2) == 1 {
			op = metav1.LabelSelectorOpDoesNotExist
		}
		return expr(s.pick("tier", "gpu"), op)
	case 5:
		return &metav1.LabelSelector{
			MatchLabels:      map[string]string{"env": s.pick("prod", "stage")},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}},
		}
	default:
		return sel("tier", "canary")
	}
}

func genCluster(s *choices, name string) Cluster {
	c := Cluster{Name: name, Labels: map[string]string{}}
	for _, k := range []string{"region", "env", "tier", "gpu"} {
		if v := s.pick("", "eu", "us", "ap", "prod", "stage", "canary"); v != "" {
			c.Labels[k] = v
		}
	}
	for _, o := range []string{"podinfo", "platform/*", "other", "security/*", "/*"} {
		if s.intn(3) == 0 {
			c.OptIns = append(c.OptIns, o)
		}
	}
	c.Suspended = s.intn(6) == 0
	c.Reachability = Reachability(s.intn(3))
	return c
}

// genWorld builds a rollout and an inventory. invalid tells whether a deliberate spec error or
// duplicate cluster was put in; most inputs are valid so the invariants get exercised.
func genWorld(s *choices) (r *v1alpha1.FleetRollout, inv Inventory, invalid bool) {
	r = rollout()
	r.Spec.Class = s.pick(v1alpha1.ClassUserWorkload, v1alpha1.ClassSystemService, v1alpha1.ClassSystemConfiguration, "")
	r.Spec.Owner = s.pick("platform", "platform", "platform", "")
	r.Spec.ClusterSelector = genSelector(s)
	for i, n := 0, s.intn(6); i < n; i++ {
		w := v1alpha1.Wave{Name: fmt.Sprintf("w%d", i), Selector: genSelector(s)}
		switch s.intn(3) {
		case 1:
			w.Count = i32(int32(1 + s.intn(12)))
		case 2:
			w.Percent = i32(int32(1 + s.intn(100)))
		}
		r.Spec.Waves = append(r.Spec.Waves, w)
	}
	if len(r.Spec.Waves) > 0 && s.intn(40) == 0 {
		invalid = true
		w := &r.Spec.Waves[s.intn(len(r.Spec.Waves))]
		switch s.intn(4) {
		case 0:
			w.Count, w.Percent = i32(0), nil
		case 1:
			w.Count, w.Percent = nil, i32(101)
		case 2:
			w.Selector = expr("region", "Near", "eu")
		default:
			w.Name = r.Spec.Waves[0].Name
			invalid = w != &r.Spec.Waves[0]
		}
	}
	// Name prefixes make name order differ from input order.
	for i, n := 0, s.intn(40); i < n; i++ {
		inv = append(inv, genCluster(s, fmt.Sprintf("%s-%02d", s.pick("eu", "us", "ap", "zz"), i)))
	}
	if len(inv) > 1 && s.intn(50) == 0 {
		invalid = true
		inv = append(inv, genCluster(s, inv[s.intn(len(inv))].Name))
	}
	return r, inv, invalid
}

// shuffled returns a permutation of inv chosen by the input: reversed and rotated.
func shuffled(inv Inventory, k int) Inventory {
	out := make(Inventory, 0, len(inv))
	for i := len(inv) - 1; i >= 0; i-- {
		out = append(out, inv[i])
	}
	if len(out) > 0 {
		k %= len(out)
		out = append(out[k:], out[:k]...)
	}
	return out
}

func oracleSelector(t *testing.T, s *metav1.LabelSelector) labels.Selector {
	if s == nil {
		return labels.Everything()
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatalf("selector %v: %v", s, err)
	}
	return sel
}

// oracleSkip is the skip rule restated: opt-in, then suspend, then Reachable=False.
func oracleSkip(r *v1alpha1.FleetRollout, c Cluster) SkipCause {
	if r.Spec.Class == v1alpha1.ClassSystemConfiguration {
		ok := false
		for _, o := range c.OptIns {
			ok = ok || o == r.Name || (r.Spec.Owner != "" && o == r.Spec.Owner+"/*")
		}
		if !ok {
			return SkipNoOptIn
		}
	}
	if c.Suspended {
		return SkipSuspended
	}
	return ""
}

func FuzzPlan(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 3, 0, 1, 1, 2, 2, 40, 1, 20, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	f.Add([]byte{2, 0, 1, 5, 2, 1, 2, 2, 3, 2, 7, 1, 4, 0, 1, 30, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5})
	f.Add([]byte("the quick brown fox jumps over the lazy dog, twice: the quick brown fox jumps over the lazy dog"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &choices{b: data}
		r, inv, invalid := genWorld(s)
		rot := s.intn(256)

		p, err := Plan(Input{Rollout: r, Inventory: inv})
		p2, err2 := Plan(Input{Rollout: r, Inventory: shuffled(inv, rot)})
		if err != nil {
			var se *SpecError
			if !invalid {
				t.Fatalf("valid world failed to plan: %v", err)
			}
			if err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("errors depend on inventory order: %v vs %v", err, err2)
			}
			if errors.As(err, &se) && (se.Rollout != "fleet/podinfo" || se.Field == "") {
				t.Fatalf("spec error does not name the rollout and field: %+v", se)
			}
			return
		}
		if err2 != nil {
			t.Fatalf("planned, but not with the inventory reordered: %v", err2)
		}
		if !reflect.DeepEqual(p, p2) {
			t.Fatalf("plan depends on inventory order:\n%s\nvs\n%s", render(p), render(p2))
		}
		if again, _ := Plan(Input{Rollout: r, Inventory: inv}); !reflect.DeepEqual(p, again) {
			t.Fatalf("same input, different plan:\n%s\nvs\n%s", render(p), render(again))
		}
		if p.Hash != Hash(&r.Spec) {
			t.Fatalf("plan hash %q, Hash(spec) %q", p.Hash, Hash(&r.Spec))
		}

		// Eligible and skipped split the clusterSelector's matches by the skip rule, sorted by name.
		cs := oracleSelector(t, r.Spec.ClusterSelector)
		var wantEligible []string
		wantSkip := map[string]SkipCause{}
		for _, c := range inv {
			if !cs.Matches(labels.Set(c.Labels)) {
				continue
			}
			if cause := oracleSkip(r, c); cause != "" {
				wantSkip[c.Name] = cause
			} else {
				wantEligible = append(wantEligible, c.Name)
			}
		}
		sort.Strings(wantEligible)
		if !reflect.DeepEqual(p.Eligible, wantEligible) {
			t.Fatalf("eligible = %q, want %q", p.Eligible, wantEligible)
		}
		if len(p.Skipped) != len(wantSkip) || !sort.SliceIsSorted(p.Skipped, func(i, j int) bool { return p.Skipped[i].Cluster < p.Skipped[j].Cluster }) {
			t.Fatalf("skipped = %+v, want %v sorted by name", p.Skipped, wantSkip)
		}
		for _, sk := range p.Skipped {
			if wantSkip[sk.Cluster] != sk.Cause || sk.Reason == "" {
				t.Fatalf("skip %+v, want cause %q and a reason", sk, wantSkip[sk.Cluster])
			}
		}

		// Waves: as in the spec (or one "all"); every eligible cluster in exactly one; nothing else in any.
		wantWaves := len(r.Spec.Waves)
		if wantWaves == 0 {
			wantWaves = 1
		}
		if len(p.Waves) != wantWaves {
			t.Fatalf("%d waves, want %d", len(p.Waves), wantWaves)
		}
		where := map[string]int{}
		for i, w := range p.Waves {
			if len(r.Spec.Waves) > 0 && w.Name != r.Spec.Waves[i].Name || len(r.Spec.Waves) == 0 && w.Name != AllWave {
				t.Fatalf("wave %d is named %q", i, w.Name)
			}
			if w.Clusters == nil || !sort.StringsAreSorted(w.Clusters) {
				t.Fatalf("wave %q members %#v: want a sorted, non-nil list", w.Name, w.Clusters)
			}
			for _, c := range w.Clusters {
				if j, dup := where[c]; dup {
					t.Fatalf("cluster %q is in waves %d and %d", c, j, i)
				}
				if _, skipped := wantSkip[c]; skipped {
					t.Fatalf("skipped cluster %q is in wave %q", c, w.Name)
				}
				where[c] = i
			}
		}
		if len(where) != len(wantEligible) {
			t.Fatalf("%d clusters in waves, %d eligible:\n%s", len(where), len(wantEligible), render(p))
		}

		// Replay the waves: each takes the first matches by name of what is left, up to its cap;
		// the last takes everything left.
		byName := map[string]Cluster{}
		for _, c := range inv {
			byName[c.Name] = c
		}
		n := len(wantEligible)
		left := append([]string(nil), wantEligible...)
		for i, w := range p.Waves {
			if i == len(p.Waves)-1 {
				if !reflect.DeepEqual(w.Clusters, append([]string{}, left...)) {
					t.Fatalf("last wave %q = %q, want all that is left %q", w.Name, w.Clusters, left)
				}
				break
			}
			spec := r.Spec.Waves[i]
			limit := len(left)
			if spec.Count != nil {
				limit = int(*spec.Count)
			}
			if spec.Percent != nil {
				pct := float64(*spec.Percent)
				limit = int(math.Ceil(pct * float64(n) / 100))
				if limit > n || (n > 0 && limit < 1) || float64(limit) < pct*float64(n)/100 || float64(limit-1) >= pct*float64(n)/100 {
					t.Fatalf("oracle percent cap %d of %d at %v%% is off", limit, n, pct)
				}
			}
			ws := oracleSelector(t, spec.Selector)
			want, rest := []string{}, []string{}
			for _, c := range left {
				if len(want) < limit && ws.Matches(labels.Set(byName[c].Labels)) {
					want = append(want, c)
				} else {
					rest = append(rest, c)
				}
			}
			if !reflect.DeepEqual(w.Clusters, want) {
				t.Fatalf("wave %q (count %v percent %v of %d) = %q, want %q", w.Name, optInt(spec.Count), optInt(spec.Percent), n, w.Clusters, want)
			}
			left = rest
		}
	})
}

// FuzzSnapshots plays a rollout wave by wave while the inventory changes between waves, starting each
// wave with Members, and checks that no cluster is snapshotted twice, that late joiners end in the
// last wave, that caps hold, and that an unchanged inventory snapshots exactly the plan.
func FuzzSnapshots(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 0, 2, 3, 1, 2, 1, 40, 0, 1, 12, 5, 5, 5, 5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte("wave after wave, clusters come and go while the rollout moves on"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &choices{b: data}
		r, inv, invalid := genWorld(s)
		if invalid {
			return
		}
		initial, err := Plan(Input{Rollout: r, Inventory: inv})
		if err != nil {
			t.Fatalf("valid world failed to plan: %v", err)
		}

		// Unchanged inventory: the snapshots are the plan.
		var started []v1alpha1.WaveStatus
		for _, w := range initial.Waves {
			m, err := Members(Input{Rollout: r, Inventory: inv}, started, w.Name)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(m, w.Clusters) {
				t.Fatalf("wave %q snapshots %q over an unchanged inventory, plan says %q", w.Name, m, w.Clusters)
			}
			started = append(started, snap(w.Name, m...))
		}

		// Changing inventory.
		started = nil
		held := map[string]string{}
		next := len(inv)
		var current WavePlan
		for idx, w := range initial.Waves {
			for k := s.intn(4); k > 0; k-- {
				switch s.intn(4) {
				case 0:
					if len(inv) > 0 {
						d := s.intn(len(inv))
						inv = append(inv[:d:d], inv[d+1:]...)
					}
				case 1, 2:
					inv = append(inv, genCluster(s, fmt.Sprintf("%s-%02d", s.pick("aa", "mm", "zz"), next)))
					next++
				default:
					if len(inv) > 0 {
						c := &inv[s.intn(len(inv))]
						c.Suspended = !c.Suspended
						c.Reachability = Reachability(s.intn(3))
					}
				}
			}
			in := Input{Rollout: r, Inventory: inv}
			current, err = Plan(in)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Members(in, started, w.Name)
			if err != nil {
				t.Fatal(err)
			}
			eligible := map[string]bool{}
			for _, c := range current.Eligible {
				eligible[c] = true
			}
			freshWave := map[string]int{}
			for i, fw := range current.Waves {
				for _, c := range fw.Clusters {
					freshWave[c] = i
				}
			}
			last := idx == len(initial.Waves)-1
			for _, c := range m {
				if prev, dup := held[c]; dup {
					t.Fatalf("cluster %q snapshotted by wave %q and again by %q", c, prev, w.Name)
				}
				if !eligible[c] {
					t.Fatalf("wave %q snapshots %q, which is not eligible", w.Name, c)
				}
				if !last && freshWave[c] < idx {
					t.Fatalf("wave %q snapshots late joiner %q (its wave %d already started)", w.Name, c, freshWave[c])
				}
				held[c] = w.Name
			}
			if !last && len(r.Spec.Waves) > 0 {
				spec := r.Spec.Waves[idx]
				n := len(current.Eligible)
				if spec.Count != nil && len(m) > int(*spec.Count) ||
					spec.Percent != nil && len(m) > int(math.Ceil(float64(*spec.Percent)*float64(n)/100)) {
					t.Fatalf("wave %q snapshots %d clusters, over its cap (count %v, percent %v of %d)", w.Name, len(m), optInt(spec.Count), optInt(spec.Percent), n)
				}
			}
			started = append(started, snap(w.Name, m...))
		}
		if j := Joined(started, current); j != nil {
			t.Fatalf("after the last wave started, eligible clusters %q are in no snapshot", j)
		}
		present := inv.names()
		for _, st := range started {
			missing := map[string]bool{}
			for _, c := range Missing(st.Clusters, inv) {
				missing[c] = true
			}
			for _, c := range st.Clusters {
				if _, ok := present[c]; ok == missing[c] {
					t.Fatalf("wave %q member %q: in inventory %v, reported missing %v", st.Name, c, ok, missing[c])
				}
			}
		}
	})
}
