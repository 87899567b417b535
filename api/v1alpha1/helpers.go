package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults for optional durations and limits.
const (
	DefaultRolloutInterval = time.Minute
	DefaultClusterInterval = time.Minute
	DefaultHistoryLimit    = 3
)

// maxNameLength is the longest object name tidegate generates: a DNS label, so the name also fits
// in a label value (kustomize-controller labels every object a Kustomization applies with the
// Kustomization's name, and tidegate labels evidence parts with their receipt's). The names it
// derives them from, a FleetRollout's and a FleetCluster's, are label values themselves
// (RolloutLabel, ClusterLabel), which CEL admission bounds to the same length.
const maxNameLength = 63

// GetConditions returns the rollout's conditions (fluxcd/pkg/runtime/conditions.Getter).
func (in *FleetRollout) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions sets the rollout's conditions (fluxcd/pkg/runtime/conditions.Setter).
func (in *FleetRollout) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// GetRequeueAfter is how long to wait before reconciling again when nothing else triggers it.
func (in *FleetRollout) GetRequeueAfter() time.Duration {
	if in.Spec.Interval != nil && in.Spec.Interval.Duration > 0 {
		return in.Spec.Interval.Duration
	}
	return DefaultRolloutInterval
}

// OnFailure returns what to do when a gate fails: spec.rollback.onFailure when set, else the policy's
// settings.onFail, else Hold.
func (in *FleetRollout) OnFailure(policy string) string {
	switch {
	case in.Spec.Rollback.OnFailure != "":
		return in.Spec.Rollback.OnFailure
	case policy != "":
		return policy
	}
	return OnFailureHold
}

// GetDeletionPolicy is spec.deletionPolicy, Orphan when empty (an object written before the field
// had its default), and Orphan for a suspended rollout: deleting it never prunes a member, as a
// suspended Kustomization's deletion prunes nothing.
func (in *FleetRollout) GetDeletionPolicy() string {
	if in.Spec.Suspend || in.Spec.DeletionPolicy != DeletionPolicyDelete {
		return DeletionPolicyOrphan
	}
	return DeletionPolicyDelete
}

// HistoryLimit returns how many past pinned sources are kept, with the default applied.
func (in *FleetRollout) HistoryLimit() int {
	if in.Spec.HistoryLimit == nil {
		return DefaultHistoryLimit
	}
	return int(*in.Spec.HistoryLimit)
}

// PreviousKnownGood is the newest entry of status.history that is not the known-good: where a
// rollback of a completed rollout goes back to. nil when there is none.
func (in *FleetRolloutStatus) PreviousKnownGood() *HistoryEntry {
	for i := range in.History {
		if in.LastKnownGood == nil || !in.History[i].IsCandidate(in.LastKnownGood.Revision, in.LastKnownGood.BuildHash) {
			return &in.History[i]
		}
	}
	return nil
}

// Approved tells whether spec.approvals approve revision for wave. An approval without a wave approves every wave.
func (in *FleetRollout) Approved(revision, wave string) bool {
	return in.ApprovalOf(revision, wave) != nil
}

// ApprovalOf is the first approval in spec.approvals of revision for wave (an approval without a
// wave approves every wave), or nil.
func (in *FleetRollout) ApprovalOf(revision, wave string) *Approval {
	for i, a := range in.Spec.Approvals {
		if a.Revision == revision && (a.Wave == "" || a.Wave == wave) {
			return &in.Spec.Approvals[i]
		}
	}
	return nil
}

// ApprovalOfCandidate is the first approval in spec.approvals of candidate c for wave ("" for an
// approval of its irreversible changes, irreversible true): one of c's revision that names c's
// build, or, when c has the revision's own pinned source (the revision as it first rolls out),
// names no build. An approval without a wave approves every wave. nil when there is none.
func (in *FleetRollout) ApprovalOfCandidate(c *RevisionStatus, wave string, irreversible bool) *Approval {
	for i, a := range in.Spec.Approvals {
		switch {
		case !in.ApprovesCandidate(a, c):
		case irreversible && a.Irreversible, !irreversible && (a.Wave == "" || a.Wave == wave):
			return &in.Spec.Approvals[i]
		}
	}
	return nil
}

// ApprovesCandidate tells whether a is an approval of candidate c: of its revision, naming its
// build, or naming none when c is the revision as it first rolls out (NeedsBuildApproval false).
func (in *FleetRollout) ApprovesCandidate(a Approval, c *RevisionStatus) bool {
	return a.Revision == c.Revision && (a.BuildHash == c.BuildHash || (a.BuildHash == "" && !in.NeedsBuildApproval(c)))
}

// NeedsBuildApproval tells whether approvals of candidate c must name its build: c is a build of a
// revision that already had a candidate, with a pinned source of its own (CandidateSourceName). A
// candidate recorded before builds were (no buildHash) needs none.
func (in *FleetRollout) NeedsBuildApproval(c *RevisionStatus) bool {
	return c.BuildHash != "" && c.Source != "" && c.Source != PinnedSourceName(in.Name, c.Revision)
}

// IrreversibleApproved tells whether spec.approvals approve the irreversible changes of revision.
func (in *FleetRollout) IrreversibleApproved(revision string) bool {
	for _, a := range in.Spec.Approvals {
		if a.Revision == revision && a.Irreversible {
			return true
		}
	}
	return false
}

// IsRejected tells whether revision is in status.rejected.
func (in *FleetRollout) IsRejected(revision string) bool {
	for _, r := range in.Status.Rejected {
		if r.Revision == revision {
			return true
		}
	}
	return false
}

// GetConditions returns the cluster's conditions (fluxcd/pkg/runtime/conditions.Getter).
func (in *FleetCluster) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions sets the cluster's conditions (fluxcd/pkg/runtime/conditions.Setter).
func (in *FleetCluster) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// GetRequeueAfter is how often the cluster is checked.
func (in *FleetCluster) GetRequeueAfter() time.Duration {
	if in.Spec.Interval != nil && in.Spec.Interval.Duration > 0 {
		return in.Spec.Interval.Duration
	}
	return DefaultClusterInterval
}

// ShortRevision returns the first 12 characters of the digest or commit in a Flux revision
// ("main@sha1:0123456789abcdef..." gives "0123456789ab"); a revision with no digest part is
// hashed, so the result is always a valid DNS label fragment.
func ShortRevision(revision string) string {
	s := revision
	if i := strings.LastIndex(s, ":"); i >= 0 {
		s = s[i+1:]
	}
	if len(s) >= 12 && isLowerHex(s[:12]) {
		return s[:12]
	}
	return hash(revision)[:12]
}

// FluxShortRevision is a Flux revision as `flux get` prints it: the commit or digest after the last
// ':' cut to 8 characters ("main@sha1:0123456789abcdef..." gives "main@sha1:01234567",
// "sha256:89ab..." gives "sha256:89abcdef"); a revision without one is returned as it is.
func FluxShortRevision(revision string) string {
	i := strings.LastIndex(revision, ":")
	if i < 0 || len(revision)-i-1 <= 8 || !isLowerHex(revision[i+1:]) {
		return revision
	}
	return revision[:i+1+8]
}

// PinnedSourceName is the name of the source tidegate pins a revision of a rollout to: <rollout>-<short revision>.
func PinnedSourceName(rollout, revision string) string {
	return boundedName(rollout, ShortRevision(revision))
}

// KustomizationName is the name of a rollout's Kustomization for one cluster: <rollout>-<cluster>.
func KustomizationName(rollout, cluster string) string {
	return boundedName(rollout, cluster)
}

// ReceiptName is the name of a receipt: <rollout>-<gate>-<content digest>, so the same decision is recorded once.
func ReceiptName(rollout, gate, contentDigest string) string {
	return boundedName(rollout, strings.ToLower(gate)+"-"+strings.TrimPrefix(contentDigest, "sha256:")[:12])
}

// boundedName is the one function every name tidegate derives goes through (Kustomizations,
// pinned sources, receipts, evidence parts): it joins prefix and suffix with a dash and, when the
// result is longer than a DNS label, cuts it to at most 54 characters and appends a dash and 8 hex
// characters of a SHA-256 of the whole name, so the name is deterministic and stays unique.
func boundedName(prefix, suffix string) string {
	name := prefix + "-" + suffix
	if len(name) <= maxNameLength {
		return name
	}
	h := hash(name)[:8]
	keep := maxNameLength - len(h) - 1
	name = strings.TrimRight(name[:keep], "-.")
	return name + "-" + h
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func isLowerHex(s string) bool {
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// CanonicalEvidence is the evidence document as it is digested: JSON with sorted keys and without
// its top-level collectedAt, so that the same evidence collected at two moments has one digest.
func CanonicalEvidence(raw []byte) ([]byte, error) {
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("evidence is not JSON: %w", err)
	}
	if m, ok := doc.(map[string]any); ok {
		delete(m, "collectedAt")
	}
	return json.Marshal(doc)
}

// EvidenceDigest is the "sha256:<hex>" of CanonicalEvidence(raw).
func EvidenceDigest(raw []byte) (string, error) {
	canonical, err := CanonicalEvidence(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canonical)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// WaveSpec returns the spec of the wave named name; a wave the spec no longer has is returned with
// its name alone.
func (fr *FleetRollout) WaveSpec(name string) Wave {
	for _, w := range fr.Spec.Waves {
		if w.Name == name {
			return w
		}
	}
	return Wave{Name: name}
}

// InstallValues are the install-time values (postBuild substitutions) the rollout gives cluster
// fc: the template's spec.template.postBuild.substitute with fc's spec.values merged over them, a
// cluster's value winning over the rollout's of the same name. nil when neither sets any; a new
// map when fc sets values, never one of the specs' own.
func (fr *FleetRollout) InstallValues(fc *FleetCluster) map[string]string {
	var rollout map[string]string
	if pb := fr.Spec.Template.PostBuild; pb != nil {
		rollout = pb.Substitute
	}
	if fc == nil || len(fc.Spec.Values) == 0 {
		return rollout
	}
	merged := make(map[string]string, len(rollout)+len(fc.Spec.Values))
	maps.Copy(merged, rollout)
	maps.Copy(merged, fc.Spec.Values)
	return merged
}

// BuildSpec is the part of the Kustomization spec tidegate writes for fr that decides what
// kustomize-controller builds from the artifact before its postBuild: spec.path and the
// template's targetNamespace, patches, images, components and decryption, and the commonMetadata
// it sets on what it applies. The evidence renders with it and each cluster's PostBuild, so that
// the gates judge the objects Flux applies. Its slices are the spec's own: do not change them.
func (fr *FleetRollout) BuildSpec() kustomizev1.KustomizationSpec {
	t := fr.Spec.Template
	return kustomizev1.KustomizationSpec{
		Path:            fr.Spec.Path,
		TargetNamespace: t.TargetNamespace,
		Patches:         t.Patches,
		Images:          t.Images,
		Components:      t.Components,
		CommonMetadata:  t.CommonMetadata,
		Decryption:      t.Decryption.Flux(),
	}
}

// Flux is d as Flux's Kustomization spec.decryption (nil for nil), with the provider it defaults to.
func (d *Decryption) Flux() *kustomizev1.Decryption {
	if d == nil {
		return nil
	}
	provider := d.Provider
	if provider == "" {
		provider = DecryptionProviderSOPS
	}
	return &kustomizev1.Decryption{Provider: provider, SecretRef: &meta.LocalObjectReference{Name: d.SecretRef.Name}}
}

// PostBuild is the postBuild of cluster fc's Kustomization: the template's, with the
// substitutions fr gives fc (InstallValues). fc nil, or a cluster without values of its own, gets
// the template's as it is (nil when it sets none); else a new object.
func (fr *FleetRollout) PostBuild(fc *FleetCluster) *kustomizev1.PostBuild {
	t := fr.Spec.Template.PostBuild
	if fc == nil || len(fc.Spec.Values) == 0 {
		return t
	}
	pb := &kustomizev1.PostBuild{}
	if t != nil {
		pb = t.DeepCopy()
	}
	pb.Substitute = fr.InstallValues(fc)
	return pb
}

// SpecBuild is the build spec asks for now: spec.path and the template's build fields (a copy
// sharing the spec's slices: do not change them).
func (fr *FleetRollout) SpecBuild() *Build {
	t := fr.Spec.Template
	return &Build{Path: fr.Spec.Path, TargetNamespace: t.TargetNamespace, Patches: t.Patches, Images: t.Images, PostBuild: t.PostBuild,
		Components: t.Components, CommonMetadata: t.CommonMetadata, Decryption: t.Decryption, Chart: fr.Spec.Chart}
}

// HashBuild is the hash of b, 12 hex characters: equal hashes are the same build.
func HashBuild(b *Build) string {
	if b == nil {
		b = &Build{}
	}
	raw, err := json.Marshal(b)
	if err != nil {
		// Build holds strings, string maps and slices of them only.
		panic(fmt.Sprintf("encoding a build: %v", err))
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:6])
}

// Built is fr as if its spec asked for build b: the FleetRollout whose Kustomizations, renders and
// values (BuildSpec, PostBuild, InstallValues, the spec's path) are those of b. nil b is fr itself.
// The copy shares everything else with fr: read it, do not change it.
func (fr *FleetRollout) Built(b *Build) *FleetRollout {
	if b == nil {
		return fr
	}
	out := *fr
	out.Spec.Path = b.Path
	out.Spec.Template.TargetNamespace = b.TargetNamespace
	out.Spec.Template.Patches = b.Patches
	out.Spec.Template.Images = b.Images
	out.Spec.Template.PostBuild = b.PostBuild
	out.Spec.Template.Components = b.Components
	out.Spec.Template.CommonMetadata = b.CommonMetadata
	out.Spec.Template.Decryption = b.Decryption
	out.Spec.Chart = b.Chart
	return &out
}

// Key identifies the candidate r among the rollout's: its revision and its build's hash.
func (r *RevisionStatus) Key() string {
	return r.Revision + "#" + r.BuildHash
}

// IsCandidate tells whether r is the candidate of revision with the build of hash buildHash.
func (r *RevisionStatus) IsCandidate(revision, buildHash string) bool {
	return r != nil && r.Revision == revision && r.BuildHash == buildHash
}

// IsRejectedBuild tells whether revision with build buildHash is in status.rejected: an entry of
// the revision that names that build, or no build.
func (in *FleetRollout) IsRejectedBuild(revision, buildHash string) bool {
	for _, r := range in.Status.Rejected {
		if r.Revision == revision && (r.BuildHash == "" || r.BuildHash == buildHash) {
			return true
		}
	}
	return false
}

// CandidateSourceName is the name of the source tidegate pins the candidate of revision with build
// buildHash to: PinnedSourceName, or, when taken says that name is pinned for another build of
// the revision (a template edit of a revision that rolled out), <rollout>-<short revision>-<build
// hash, 8 characters>, so that each candidate has its own pinned source and a Kustomization's
// source says which candidate it runs.
func CandidateSourceName(rollout, revision, buildHash string, taken func(name string) bool) string {
	name := PinnedSourceName(rollout, revision)
	if buildHash == "" || taken == nil || !taken(name) {
		return name
	}
	return boundedName(name, buildHash[:min(8, len(buildHash))])
}

// LedgerName is the name of the ledger of candidate c of the rollout: LedgerName of its revision,
// or, for a candidate with its own build's pinned source (CandidateSourceName), of the revision and
// that source, so that each candidate has its own record.
func (r *RevisionStatus) LedgerName(rollout string) string {
	if r.Source == "" || r.Source == PinnedSourceName(rollout, r.Revision) {
		return LedgerName(rollout, r.Revision)
	}
	return LedgerName(rollout, r.Revision+"#"+r.Source)
}

// LedgerName is the name of the ledger of a rollout's revision: <rollout>-ledger-<12 hex characters
// of the revision's sha256>.
func LedgerName(rollout, revision string) string {
	return boundedName(rollout, "ledger-"+hash(revision)[:12])
}

// LedgerPartName is the name of part n of the ledger named first: first itself for part 1, and for
// n > 1 the ledger that continues part n-1 once it holds MaxLedgerEntries (first-2, first-3, …).
func LedgerPartName(first string, n int) string {
	if n <= 1 {
		return first
	}
	return boundedName(first, strconv.Itoa(n))
}

// IsChart tells whether the rollout's package is a Helm chart (spec.chart): its members are
// HelmReleases, not Kustomizations.
func (fr *FleetRollout) IsChart() bool { return fr.Spec.Chart != nil }

// ReleaseName is the Helm release name of the rollout's chart on every member:
// spec.chart.releaseName, else the rollout's name. "" for a rollout that is not a chart.
func (fr *FleetRollout) ReleaseName() string {
	switch {
	case fr.Spec.Chart == nil:
		return ""
	case fr.Spec.Chart.ReleaseName != "":
		return fr.Spec.Chart.ReleaseName
	}
	return fr.Name
}

// ReleaseNamespace is the namespace the rollout's chart is installed in on every member, where
// Helm stores its release too: spec.template.targetNamespace, else the rollout's namespace.
func (fr *FleetRollout) ReleaseNamespace() string {
	if ns := fr.Spec.Template.TargetNamespace; ns != "" {
		return ns
	}
	return fr.Namespace
}

// ChartValues are the values of cluster fc's HelmRelease (fc nil: a cluster without values of its
// own): spec.chart.values, with each of fc's spec.values set over them at the dotted path its key
// names, as a string, as helm install --set-string sets it (a key "ingress.host" sets host in the
// map ingress, making it when it is missing, and replacing anything but a map there). nil when
// neither sets any; always a new map otherwise.
func (fr *FleetRollout) ChartValues(fc *FleetCluster) (map[string]any, error) {
	var values map[string]any
	if c := fr.Spec.Chart; c != nil && c.Values != nil && len(c.Values.Raw) > 0 {
		if err := json.Unmarshal(c.Values.Raw, &values); err != nil {
			return nil, fmt.Errorf("spec.chart.values of FleetRollout %s/%s is not a JSON object: %w", fr.Namespace, fr.Name, err)
		}
	}
	if fc == nil || len(fc.Spec.Values) == 0 {
		return values, nil
	}
	if values == nil {
		values = map[string]any{}
	}
	for _, k := range slices.Sorted(maps.Keys(fc.Spec.Values)) {
		if err := setPath(values, k, fc.Spec.Values[k]); err != nil {
			return nil, fmt.Errorf("spec.values of FleetCluster %s/%s: %w", fc.Namespace, fc.Name, err)
		}
	}
	return values, nil
}

// setPath sets v at the dotted path key of values, making the maps on the way.
func setPath(values map[string]any, key, v string) error {
	parts := strings.Split(key, ".")
	m := values
	for i, p := range parts {
		if p == "" {
			return fmt.Errorf("value %q: a key is a dotted path of names, such as region or ingress.host, with no empty name", key)
		}
		if i == len(parts)-1 {
			m[p] = v
			return nil
		}
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	return nil
}
