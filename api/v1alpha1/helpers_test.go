package v1alpha1

import (
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestShortRevision(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"main@sha1:0123456789abcdef0123456789abcdef01234567", "0123456789ab"},
		{"v1.2.0@sha256:fedcba9876543210fedcba9876543210", "fedcba987654"},
		{"sha256:aaaaaaaaaaaabbbb", "aaaaaaaaaaaa"},
	} {
		if got := ShortRevision(tc.in); got != tc.want {
			t.Errorf("ShortRevision(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Revisions without a hex digest are hashed: stable, 12 characters, a DNS label.
	a, b := ShortRevision("main@UPPER:XYZ"), ShortRevision("main@UPPER:XYZ")
	if a != b || len(a) != 12 || len(validation.IsDNS1123Label(a)) != 0 {
		t.Errorf("ShortRevision of a non-hex revision = %q, %q: want one stable 12-char DNS label", a, b)
	}
}

// FluxShortRevision cuts the commit or digest to 8 characters, as `flux get` prints revisions.
func TestFluxShortRevision(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"main@sha1:0123456789abcdef0123456789abcdef01234567", "main@sha1:01234567"},
		{"v1.2.0@sha256:fedcba9876543210fedcba9876543210", "v1.2.0@sha256:fedcba98"},
		{"sha256:aaaaaaaaaaaabbbb", "sha256:aaaaaaaa"},
		{"main@sha1:01234567", "main@sha1:01234567"},
		{"main", "main"},
		{"main@UPPER:XYZXYZXYZXYZ", "main@UPPER:XYZXYZXYZXYZ"},
	} {
		if got := FluxShortRevision(tc.in); got != tc.want {
			t.Errorf("FluxShortRevision(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestGeneratedNamesAreBoundedDNSLabels(t *testing.T) {
	long := strings.Repeat("very-long-rollout-name", 5)
	names := []string{
		KustomizationName("podinfo", "eu-1"),
		KustomizationName(long, "cluster-7"),
		KustomizationName(long, "cluster-8"),
		PinnedSourceName(long, "main@sha1:0123456789abcdef"),
		ReceiptName(long, GateNoDisruption, "sha256:0123456789abcdef0123"),
	}
	if names[0] != "podinfo-eu-1" {
		t.Errorf("short names are kept as they are: got %q", names[0])
	}
	if names[1] == names[2] {
		t.Errorf("cut names must stay unique: %q == %q", names[1], names[2])
	}
	for _, n := range names {
		if errs := validation.IsDNS1123Label(n); len(errs) != 0 {
			t.Errorf("%q is not a DNS label: %v", n, errs)
		}
	}
}

// Every name tidegate derives, from the longest names admission lets through (63 characters for
// a FleetRollout and a FleetCluster, both label values), is a DNS label, the same on every call,
// and distinct for distinct inputs.
func TestDerivedNamesOfLongestInputsAreBoundedAndDeterministic(t *testing.T) {
	rollout, cluster := strings.Repeat("r", 63), strings.Repeat("c", 62)+"1"
	receipt := ReceiptName(rollout, GateNoDisruption, "sha256:"+strings.Repeat("ab", 32))
	names := map[string]string{
		"kustomization":        KustomizationName(rollout, cluster),
		"kustomization, other": KustomizationName(rollout, strings.Repeat("c", 62)+"2"),
		"pinned source":        PinnedSourceName(rollout, "main@sha1:0123456789abcdef0123456789abcdef01234567"),
		"receipt":              receipt,
		"evidence part":        EvidencePartName(receipt, "sha256:"+strings.Repeat("cd", 32)),
		"evidence part, other": EvidencePartName(receipt, "sha256:"+strings.Repeat("ef", 32)),
	}
	seen := map[string]string{}
	for what, n := range names {
		if errs := validation.IsDNS1123Label(n); len(errs) != 0 {
			t.Errorf("%s name %q is not a DNS label: %v", what, n, errs)
		}
		if errs := validation.IsValidLabelValue(n); len(errs) != 0 {
			t.Errorf("%s name %q is not a label value: %v", what, n, errs)
		}
		if other, dup := seen[n]; dup {
			t.Errorf("%s and %s have the same name %q", what, other, n)
		}
		seen[n] = what
	}
	if again := EvidencePartName(receipt, "sha256:"+strings.Repeat("cd", 32)); again != names["evidence part"] {
		t.Errorf("the same part is named %q, then %q", names["evidence part"], again)
	}
	if got := EvidencePartName("web-nodisruption-0123456789ab", "sha256:"+strings.Repeat("cd", 32)); got != "web-nodisruption-0123456789ab-cdcdcdcdcdcd" {
		t.Errorf("a short part name is kept as it is: got %q", got)
	}
}

func TestReceiptContentDigestIgnoresEvaluationTime(t *testing.T) {
	spec := GateReceiptSpec{
		Gate: GateNoDisruption, Rollout: "podinfo", Wave: "canary",
		Candidate: RevisionStatus{Revision: "main@sha1:abc", Digest: "sha256:1"},
		Result:    ResultPass, EvidenceDigest: "sha256:2",
		EvaluatedAt: metav1.NewTime(time.Unix(100, 0)),
	}
	later := spec.DeepCopy()
	later.EvaluatedAt = metav1.NewTime(time.Unix(200, 0))
	d1, err := spec.ContentDigest()
	if err != nil {
		t.Fatal(err)
	}
	d2, _ := later.ContentDigest()
	if d1 != d2 {
		t.Errorf("same decision at another time must have the same digest: %s != %s", d1, d2)
	}
	failed := spec.DeepCopy()
	failed.Result = ResultFail
	d3, _ := failed.ContentDigest()
	if d3 == d1 {
		t.Errorf("a different result must change the digest")
	}
	if !strings.HasPrefix(d1, "sha256:") || len(d1) != len("sha256:")+64 {
		t.Errorf("digest %q is not sha256:<64 hex>", d1)
	}

	// The same evidence collected at another moment is the same decision; other evidence is not.
	withEvidence := func(raw string) string {
		c := spec.DeepCopy()
		c.Evidence = &apiextensionsv1.JSON{Raw: []byte(raw)}
		d, err := c.ContentDigest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	e1 := withEvidence(`{"wave":"canary","collectedAt":"2026-11-30T10:00:00Z","clusters":[1]}`)
	e2 := withEvidence(`{"clusters":[1],"collectedAt":"2026-11-30T11:00:00Z","wave":"canary"}`)
	e3 := withEvidence(`{"wave":"canary","collectedAt":"2026-11-30T10:00:00Z","clusters":[2]}`)
	if e1 != e2 {
		t.Errorf("evidence differing only in collectedAt and key order must digest alike: %s != %s", e1, e2)
	}
	if e1 == e3 {
		t.Errorf("different evidence must change the digest")
	}
	ed1, _ := EvidenceDigest([]byte(`{"a":1,"collectedAt":"x"}`))
	ed2, _ := EvidenceDigest([]byte(`{"a":1}`))
	if ed1 != ed2 {
		t.Errorf("EvidenceDigest must ignore collectedAt: %s != %s", ed1, ed2)
	}
	if _, err := EvidenceDigest([]byte(`{`)); err == nil {
		t.Errorf("EvidenceDigest of broken JSON must fail")
	}
}

func TestRolloutDefaultsAndApprovals(t *testing.T) {
	r := &FleetRollout{}
	if r.OnFailure("") != OnFailureHold || r.HistoryLimit() != DefaultHistoryLimit || r.GetRequeueAfter() != DefaultRolloutInterval {
		t.Errorf("defaults: onFailure=%s historyLimit=%d interval=%s", r.OnFailure(""), r.HistoryLimit(), r.GetRequeueAfter())
	}
	if got := r.OnFailure(OnFailureRollback); got != OnFailureRollback {
		t.Errorf("onFailure with the policy saying Rollback and the spec silent = %s, want Rollback", got)
	}
	r.Spec.Rollback.OnFailure = OnFailureHold
	if got := r.OnFailure(OnFailureRollback); got != OnFailureHold {
		t.Errorf("onFailure with the spec saying Hold and the policy Rollback = %s, want the spec's Hold", got)
	}
	r.Spec.Rollback.OnFailure = ""
	r.Spec.Approvals = []Approval{{Revision: "r2", Wave: "canary"}, {Revision: "r3"}, {Revision: "r4", Irreversible: true}}
	for _, tc := range []struct {
		rev, wave string
		want      bool
	}{{"r2", "canary", true}, {"r2", "ring-1", false}, {"r3", "anything", true}, {"r1", "canary", false}} {
		if got := r.Approved(tc.rev, tc.wave); got != tc.want {
			t.Errorf("Approved(%s, %s) = %v, want %v", tc.rev, tc.wave, got, tc.want)
		}
	}
	if r.IrreversibleApproved("r3") || !r.IrreversibleApproved("r4") {
		t.Errorf("irreversible approval must be explicit")
	}
	r.Status.Rejected = []RejectedRevision{{Revision: "bad"}}
	if !r.IsRejected("bad") || r.IsRejected("good") {
		t.Errorf("IsRejected wrong")
	}
}

// Deleting a rollout prunes its members only when spec.deletionPolicy says Delete and the rollout is
// not suspended; empty (an object from before the field had its default) orphans.
func TestDeletionPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy  string
		suspend bool
		want    string
	}{
		{"", false, DeletionPolicyOrphan},
		{DeletionPolicyOrphan, false, DeletionPolicyOrphan},
		{DeletionPolicyDelete, false, DeletionPolicyDelete},
		{DeletionPolicyDelete, true, DeletionPolicyOrphan},
		{"Unknown", false, DeletionPolicyOrphan},
	} {
		r := &FleetRollout{Spec: FleetRolloutSpec{DeletionPolicy: tc.policy, Suspend: tc.suspend}}
		if got := r.GetDeletionPolicy(); got != tc.want {
			t.Errorf("deletionPolicy %q, suspend %v: GetDeletionPolicy() = %s, want %s", tc.policy, tc.suspend, got, tc.want)
		}
	}
}

func TestInstallValuesMergeTheClusterOverTheRollout(t *testing.T) {
	fr := &FleetRollout{}
	fc := &FleetCluster{}
	if got := fr.InstallValues(fc); got != nil {
		t.Errorf("no values anywhere: %v, want nil", got)
	}
	fr.Spec.Template.PostBuild = &kustomizev1.PostBuild{Substitute: map[string]string{"region": "eu", "size": "small"}}
	if got := fr.InstallValues(fc); !maps.Equal(got, map[string]string{"region": "eu", "size": "small"}) {
		t.Errorf("a cluster without values gets the rollout's: %v", got)
	}
	if got := fr.InstallValues(nil); len(got) != 2 {
		t.Errorf("a cluster that is gone gets the rollout's: %v", got)
	}
	fc.Spec.Values = map[string]string{"size": "large", "namespace": "team-a"}
	want := map[string]string{"region": "eu", "size": "large", "namespace": "team-a"}
	if got := fr.InstallValues(fc); !maps.Equal(got, want) {
		t.Errorf("merged %v, want %v: the cluster's value wins", got, want)
	}
	if fr.Spec.Template.PostBuild.Substitute["size"] != "small" || len(fr.Spec.Template.PostBuild.Substitute) != 2 || len(fc.Spec.Values) != 2 {
		t.Errorf("merging changed a spec: rollout %v, cluster %v", fr.Spec.Template.PostBuild.Substitute, fc.Spec.Values)
	}
	fr.Spec.Template.PostBuild = nil
	if got := fr.InstallValues(fc); !maps.Equal(got, fc.Spec.Values) {
		t.Errorf("a rollout without postBuild: %v, want the cluster's values", got)
	}
}

// A build is the spec's path and the template's build fields: its hash changes with any of them
// and with nothing else; Built reads a rollout as if its spec asked for another build without
// changing it; a candidate of a revision already pinned for another build gets its own source and
// ledger; a rejection names its build.
func TestBuilds(t *testing.T) {
	fr := &FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: FleetRolloutSpec{Path: "./app"}}
	base := HashBuild(fr.SpecBuild())
	if len(base) != 12 || HashBuild(fr.SpecBuild()) != base {
		t.Fatalf("hash %q is not 12 stable hex characters", base)
	}
	fr.Spec.Template.Interval = &metav1.Duration{Duration: time.Minute}
	if HashBuild(fr.SpecBuild()) != base {
		t.Error("the interval is not part of the build")
	}
	edited := fr.DeepCopy()
	edited.Spec.Template.TargetNamespace = "team-a"
	other := edited.SpecBuild()
	if HashBuild(other) == base {
		t.Error("targetNamespace is part of the build")
	}
	view := fr.Built(other)
	if view.Spec.Template.TargetNamespace != "team-a" || fr.Spec.Template.TargetNamespace != "" || view.Spec.Template.Interval != fr.Spec.Template.Interval {
		t.Errorf("Built: %+v, from %+v", view.Spec.Template, fr.Spec.Template)
	}
	if fr.Built(nil) != fr {
		t.Error("Built(nil) is the rollout itself")
	}

	rev := "main@sha1:0123456789abcdef0123456789abcdef01234567"
	plain := PinnedSourceName("web", rev)
	if got := CandidateSourceName("web", rev, base, func(string) bool { return false }); got != plain {
		t.Errorf("a revision's first build: %s, want %s", got, plain)
	}
	own := CandidateSourceName("web", rev, HashBuild(other), func(n string) bool { return n == plain })
	if own == plain || !strings.HasPrefix(own, plain+"-") {
		t.Errorf("another build of a pinned revision: %s", own)
	}
	first := RevisionStatus{Revision: rev, Source: plain}
	second := RevisionStatus{Revision: rev, Source: own}
	if first.LedgerName("web") != LedgerName("web", rev) || second.LedgerName("web") == first.LedgerName("web") {
		t.Errorf("ledgers: %s and %s", first.LedgerName("web"), second.LedgerName("web"))
	}

	fr.Status.Rejected = []RejectedRevision{{Revision: rev, BuildHash: HashBuild(other)}}
	if !fr.IsRejectedBuild(rev, HashBuild(other)) || fr.IsRejectedBuild(rev, base) {
		t.Errorf("a rejection names its build: %+v", fr.Status.Rejected)
	}
	fr.Status.Rejected = []RejectedRevision{{Revision: rev}}
	if !fr.IsRejectedBuild(rev, base) {
		t.Error("a rejection without a build rejects every build")
	}
}

// An approval of a revision approves it as it first rolls out; a build edit of it (its own pinned
// source) is approved only by an approval naming its build.
func TestApprovalsOfABuild(t *testing.T) {
	rev := "main@sha1:0123456789abcdef0123456789abcdef01234567"
	fr := &FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
	first := &RevisionStatus{Revision: rev, Source: PinnedSourceName("web", rev), BuildHash: "aaaaaaaaaaaa"}
	edit := &RevisionStatus{Revision: rev, Source: PinnedSourceName("web", rev) + "-bbbbbbbb", BuildHash: "bbbbbbbbbbbb"}
	fr.Spec.Approvals = []Approval{{Revision: rev, Wave: "ring"}, {Revision: rev, Irreversible: true}}
	if fr.ApprovalOfCandidate(first, "ring", false) == nil || fr.ApprovalOfCandidate(first, "", true) == nil {
		t.Error("an approval of the revision approves its first candidate")
	}
	if fr.ApprovalOfCandidate(edit, "ring", false) != nil || fr.ApprovalOfCandidate(edit, "", true) != nil || !fr.NeedsBuildApproval(edit) {
		t.Error("an approval of the revision alone approves a build edit of it")
	}
	fr.Spec.Approvals = append(fr.Spec.Approvals, Approval{Revision: rev, Wave: "ring", BuildHash: edit.BuildHash})
	if a := fr.ApprovalOfCandidate(edit, "ring", false); a == nil || a.BuildHash != edit.BuildHash {
		t.Errorf("an approval naming the build approves it: %+v", a)
	}
	if fr.ApprovalOfCandidate(edit, "rest", false) != nil {
		t.Error("an approval of wave ring approves wave rest")
	}
}

func TestChartValuesSetClusterValuesAtTheirPaths(t *testing.T) {
	fr := &FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "apps"},
		Spec: FleetRolloutSpec{Chart: &ChartSpec{Values: &apiextensionsv1.JSON{
			Raw: []byte(`{"replicaCount":2,"ingress":{"enabled":true,"host":"default.example"},"region":{"name":"x"}}`)}}}}
	fc := &FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1", Namespace: "apps"},
		Spec: FleetClusterSpec{Values: map[string]string{"ingress.host": "eu-1.example", "region": "eu", "tier.name": "gold"}}}
	got, err := fr.ChartValues(fc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"replicaCount": float64(2), "ingress": map[string]any{"enabled": true, "host": "eu-1.example"},
		"region": "eu", "tier": map[string]any{"name": "gold"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("values %v, want %v", got, want)
	}
	if again, _ := fr.ChartValues(nil); !reflect.DeepEqual(again["region"], map[string]any{"name": "x"}) {
		t.Fatalf("a cluster's values changed the rollout's: %v", again)
	}
	fc.Spec.Values = map[string]string{"ingress..host": "x"}
	if _, err := fr.ChartValues(fc); err == nil || !strings.Contains(err.Error(), "FleetCluster apps/eu-1") {
		t.Fatalf("an empty path segment: %v, want an error naming the FleetCluster", err)
	}
}
