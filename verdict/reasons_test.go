package verdict

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestReasonPath(t *testing.T) {
	for _, tt := range []struct {
		reason string
		want   []string
	}{
		{"noDisruption.clusters.3.ready: conflicting values true and false (clusters.3: member-3)", []string{"clusters", "3", "ready"}},
		{`noDisruption._missing."eu-3": target eu-3 has no continuity evidence`, []string{"_missing", "eu-3"}},
		{`noDisruption.labels."a.b: c".x: invalid value`, []string{"labels", "a.b: c", "x"}},
		{"noDisruption: no evidence was collected; a gate without evidence fails", nil},
		{"noDisruption: inconclusive: target eu-1 could not be observed: timeout", nil},
		{"deploySafe.render.ok: the candidate does not render", nil},
		{"inconclusive since 2026-03-01T10:00:00Z, longer than the policy's settings.inconclusiveAfter", nil},
		{"noDisruption.clusters.0", nil},
	} {
		if got := ReasonPath(GateNoDisruption, tt.reason); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ReasonPath(%q) = %q, want %q", tt.reason, got, tt.want)
		}
	}
}

// Every reason the built-in policy gives leads back to the evidence value it is about.
func TestEvidenceAtFollowsReasons(t *testing.T) {
	ev := wave(12, 0)
	ev.Clusters[10].SetAvailability(true, 0.5, 45)
	d, err := Evaluate(DefaultPolicy(), GateNoDisruption, ev)
	if err != nil || d.Pass || len(d.Reasons) != 2 {
		t.Fatalf("decision %+v, %v: want two reasons", d, err)
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"minAvailableRatio": 0.5, "unavailableSeconds": 45.0}
	for _, r := range d.Reasons {
		path := ReasonPath(GateNoDisruption, r)
		if len(path) != 3 {
			t.Errorf("reason %q: path %q", r, path)
			continue
		}
		v, found, about := EvidenceAt(doc, path)
		if !found || v != want[path[2]] || about != "clusters.10: member-0010" {
			t.Errorf("reason %q: evidence %v (found %t) about %q, want %v about member-0010", r, v, found, about, want[path[2]])
		}
	}
	if _, found, _ := EvidenceAt(doc, []string{"_budget"}); found {
		t.Error("a hidden field of the policy was found in the evidence")
	}
}
