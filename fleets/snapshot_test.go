package fleets

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"reflect"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

func snap(name string, clusters ...string) v1alpha1.WaveStatus {
	return v1alpha1.WaveStatus{Name: name, Clusters: clusters}
}

func TestMissing(t *testing.T) {
	inv := Inventory{cl("a"), suspended(cl("c")), unreachable(cl("d"))}
	for _, tc := range []struct {
		name    string
		members []string
		want    []string
	}{
		{"all present", []string{"a", "c"}, nil},
		{"deleted ones, sorted and once", []string{"z", "a", "b", "z"}, []string{"b", "z"}},
		{"suspended or unreachable members are not missing", []string{"c", "d"}, nil},
		{"no members", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Missing(tc.members, inv); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Missing(%q) = %q, want %q", tc.members, got, tc.want)
			}
		})
	}
	if got := Missing([]string{"a"}, nil); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("Missing against an empty inventory = %q, want every member", got)
	}
}

// scenario: canary count 1, ring count 1, rest. Canary started with b when the fleet was b, c, d;
// then a (sorting first) and e were created and b was deleted.
func TestSnapshotsAfterTheInventoryChanged(t *testing.T) {
	r := rollout(count("canary", nil, 1), count("ring", nil, 1), wv("rest", nil))
	before := Inventory{cl("b"), cl("c"), cl("d")}
	first, err := Members(Input{Rollout: r, Inventory: before}, nil, "canary")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, []string{"b"}) {
		t.Fatalf("canary members = %q, want [b]", first)
	}
	started := []v1alpha1.WaveStatus{snap("canary", first...)}

	now := Inventory{cl("a"), cl("c"), cl("d"), cl("e")}
	in := Input{Rollout: r, Inventory: now}
	current, err := Plan(in)
	if err != nil {
		t.Fatal(err)
	}
	// A fresh plan puts a in the canary slot and c in ring: it knows nothing of the snapshot.
	if got := render(current); got != lines("canary: a", "ring: c", "rest: d e") {
		t.Fatalf("fresh plan:\n%s", got)
	}
	if got := Missing(started[0].Clusters, now); !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("Missing = %q, want [b]", got)
	}
	// a's wave (canary) started before a existed: a is late and waits for the last wave.
	if got := Joined(started, current); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("Joined = %q, want [a]", got)
	}

	ring, err := Members(in, started, "ring")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ring, []string{"c"}) {
		t.Errorf("ring members = %q, want [c]: a is late, ring keeps its count of 1", ring)
	}
	started = append(started, snap("ring", ring...))
	// A retried start of ring (its own entry already recorded) computes the same members.
	if again, _ := Members(in, started, "ring"); !reflect.DeepEqual(again, ring) {
		t.Errorf("retried ring members = %q, want %q", again, ring)
	}

	rest, err := Members(in, started, "rest")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rest, []string{"a", "d", "e"}) {
		t.Errorf("rest members = %q, want [a d e]: the last wave takes the late joiner", rest)
	}
	started = append(started, snap("rest", rest...))
	if got := Joined(started, current); got != nil {
		t.Errorf("Joined after every wave = %q, want none", got)
	}

	// A cluster created after the last wave started waits for the next revision.
	later := append(now, cl("f"))
	p, _ := Plan(Input{Rollout: r, Inventory: later})
	if got := Joined(started, p); !reflect.DeepEqual(got, []string{"f"}) {
		t.Errorf("Joined after the last wave started = %q, want [f]", got)
	}
}

func TestMembersRefillsAWaveWhoseClustersWereTakenEarlier(t *testing.T) {
	// The canary took b while the fleet was b, c, d. Then a was created: a fresh plan puts a in the
	// canary and b, c in eu, so eu minus the snapshot would be [c] alone, short of its count.
	r := rollout(count("canary", nil, 1), count("eu", sel("region", "eu"), 2), wv("rest", nil))
	started := []v1alpha1.WaveStatus{snap("canary", "b")}
	in := Input{Rollout: r, Inventory: Inventory{cl("a"), cl("b", "region", "eu"), cl("c", "region", "eu"), cl("d", "region", "eu")}}
	got, err := Members(in, started, "eu")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []string{"c", "d"}) {
		t.Errorf("eu members = %q, want [c d]", got)
	}
}

func TestMembersNeverReturnsNilForAnEmptyWave(t *testing.T) {
	r := rollout(wv("gpu", sel("gpu", "yes")), wv("rest", nil))
	for _, w := range []string{"gpu", "rest"} {
		got, err := Members(Input{Rollout: r}, nil, w)
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("Members(%q) over an empty fleet = %#v, %v; want an empty, non-nil list", w, got, err)
		}
	}
}

func TestMembersErrors(t *testing.T) {
	r := rollout(count("canary", nil, 1))
	_, err := Members(Input{Rollout: r, Inventory: named(2)}, nil, "ring-9")
	if err == nil || !strings.Contains(err.Error(), `wave "ring-9" is not in the plan`) || !strings.Contains(err.Error(), "fleet/podinfo") {
		t.Errorf("Members of an unknown wave: %v", err)
	}
	_, err = Members(Input{Rollout: rollout(count("canary", nil, 0))}, nil, "canary")
	if err == nil || !strings.Contains(err.Error(), "count 0") {
		t.Errorf("Members with an invalid spec: %v, want Plan's error", err)
	}
}

// A started wave's member that becomes unreachable, is suspended or is deselected stays in the plan
// where its wave put it: no other cluster takes its slot, none is reported late, and the next wave
// takes the clusters it was planned to take. Once the rollout rests, the next candidate plans afresh.
func TestStartedMembersKeepTheirPlace(t *testing.T) {
	r := rollout(count("canary", nil, 1), percent("ring", nil, 50), wv("rest", nil))
	r.Spec.ClusterSelector = sel("env", "prod")
	inv := Inventory{cl("a", "env", "prod"), cl("b", "env", "prod"), cl("c", "env", "prod"), cl("d", "env", "prod")}
	canary, err := Members(Input{Rollout: r, Inventory: inv}, nil, "canary")
	if err != nil || !reflect.DeepEqual(canary, []string{"a"}) {
		t.Fatalf("canary = %q, %v; want [a]", canary, err)
	}
	now := metav1.Now()
	r.Status.Candidate = &v1alpha1.RevisionStatus{Revision: "r2"}
	r.Status.Phase = v1alpha1.PhaseProgressing
	r.Status.Waves = []v1alpha1.WaveStatus{
		{Name: "canary", Phase: v1alpha1.WaveSoaking, Clusters: canary, StartedAt: &now},
		{Name: "ring", Phase: v1alpha1.WavePending}, {Name: "rest", Phase: v1alpha1.WavePending},
	}
	for name, changed := range map[string]Cluster{
		"unreachable": unreachable(cl("a", "env", "prod")),
		"suspended":   suspended(cl("a", "env", "prod")),
		"deselected":  cl("a", "env", "staging"),
	} {
		t.Run(name, func(t *testing.T) {
			in := Input{Rollout: r, Inventory: Inventory{changed, inv[1], inv[2], inv[3]}}
			p, err := Plan(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := render(p); got != lines("canary: a", "ring: b c", "rest: d") {
				t.Errorf("plan:\n%s", got)
			}
			if len(p.Skipped) != 0 {
				t.Errorf("a started member is not skipped: %+v", p.Skipped)
			}
			if got := Joined(r.Status.Waves[:1], p); got != nil {
				t.Errorf("Joined = %q, want none: every cluster was in the fleet from the start", got)
			}
			ring, err := Members(in, r.Status.Waves[:1], "ring")
			if err != nil || !reflect.DeepEqual(ring, []string{"b", "c"}) {
				t.Errorf("ring = %q, %v; want [b c] (50%% of 4, as planned)", ring, err)
			}
		})
	}
	t.Run("the next candidate plans afresh", func(t *testing.T) {
		done := r.DeepCopy()
		done.Status.Phase = v1alpha1.PhaseCompleted
		p, err := Plan(Input{Rollout: done, Inventory: Inventory{suspended(cl("a", "env", "prod")), inv[1], inv[2], inv[3]}})
		if err != nil {
			t.Fatal(err)
		}
		if got := render(p); got != lines("canary: b", "ring: c d", "rest:", "skip a: Suspended") {
			t.Errorf("plan:\n%s\nskipped %+v", got, p.Skipped)
		}
	})
}
