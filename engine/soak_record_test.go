package engine

import (
	"testing"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// A soak record is never replaced by one that knows less of a cluster: a collector that restarted
// its count (fewer samples), or has no samples of a cluster yet, leaves what was recorded of it.
func TestKeepLongerSoaks(t *testing.T) {
	kept := []v1alpha1.SoakSamples{
		{Cluster: "a", Samples: 12, MinAvailablePermille: 0, UnavailableSeconds: 10},
		{Cluster: "b", Samples: 12, MinAvailablePermille: 1000},
		{Cluster: "c", Samples: 3, MinAvailablePermille: 1000},
	}
	now := []v1alpha1.SoakSamples{
		{Cluster: "a", Samples: 4, MinAvailablePermille: 1000},
		{Cluster: "b", Samples: 14, MinAvailablePermille: 1000},
	}
	got := KeepLongerSoaks(kept, now)
	want := map[string]int32{"a": 12, "b": 14, "c": 3}
	if len(got) != len(want) {
		t.Fatalf("record %+v, want an entry each for a, b and c", got)
	}
	for _, e := range got {
		if e.Samples != want[e.Cluster] {
			t.Errorf("%s: %d samples recorded, want %d", e.Cluster, e.Samples, want[e.Cluster])
		}
		if e.Cluster == "a" && (e.MinAvailablePermille != 0 || e.UnavailableSeconds != 10) {
			t.Errorf("a's recorded disruption was lost: %+v", e)
		}
	}
	if now[0].Samples != 4 {
		t.Errorf("the collector's summary was changed: %+v", now)
	}
	if got := KeepLongerSoaks(nil, now); len(got) != 2 {
		t.Errorf("with nothing recorded, the record is the samples: %+v", got)
	}
}
