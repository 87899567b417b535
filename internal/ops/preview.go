package ops

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"path"
	"strings"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/install"
	"github.com/tidegate/tidegate/verdict"
)

// Artifact limits of a preview, as the controller's (evidence/collector): an artifact larger than
// this is refused rather than held in memory.
const (
	maxPreviewArtifactBytes = 64 << 20
	maxPreviewFiles         = 20000
	maxPreviewUnpacked      = 256 << 20
)

// ValuesPreview is what deploySafe would find of install-time values set on a rollout, checked
// against the tidegate/install.cue of the artifact at an exact digest.
type ValuesPreview struct {
	Rollout Ref `json:"rollout"`
	// Artifact is the revision and digest checked against, and the source that serves it.
	Artifact Revision `json:"artifact"`
	Source   Ref      `json:"source"`
	// Values are the values checked: the rollout's spec.template.postBuild.substitute with the
	// values given over them, as the change would leave them.
	Values map[string]string `json:"values"`
	// Schema is false when the package ships no tidegate/install.cue: nothing is checked, and
	// deploySafe does not refuse any value.
	Schema        bool     `json:"schema"`
	UnknownKeys   []string `json:"unknownKeys,omitempty"`
	ProtectedKeys []string `json:"protectedKeys,omitempty"`
	Violations    []string `json:"violations,omitempty"`
	// Refused is true when deploySafe would refuse a change with these values.
	Refused bool `json:"refused"`
}

// PreviewValues checks install-time values, set over rollout ns/name's own, against the
// tidegate/install.cue at the rollout's path in the artifact with digest (the candidate's when
// empty). The digest must be one of the rollout's: its candidate's, its known-good's, or what its
// tracked source serves now. The artifact is fetched from source-controller's artifact URL, as the
// controller does, and checked against the digest; that URL is usually served inside the cluster
// only, and an artifact that cannot be fetched is a CodeUnavailable error, never a pass.
func PreviewValues(ctx context.Context, c client.Client, hc *http.Client, ns, name, digest string, values map[string]string) (ValuesPreview, error) {
	ref := RolloutRef(ns, name)
	p := ValuesPreview{Rollout: ref}
	if name == "" {
		return p, Errorf(CodeInvalid, nil, "name the rollout whose install-time values to preview")
	}
	fr := &v1alpha1.FleetRollout{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, fr); err != nil {
		return p, AsError(err, ref)
	}
	src, art, err := artifactOf(ctx, c, fr, digest)
	if err != nil {
		return p, err
	}
	p.Source, p.Artifact = src, art
	p.Values = fr.InstallValues(nil)
	if p.Values == nil {
		p.Values = map[string]string{}
	}
	maps.Copy(p.Values, values)

	schema, err := installSchema(ctx, c, hc, fr, src, art)
	if err != nil {
		return p, err
	}
	ev, err := install.Check(schema, p.Values)
	if err != nil {
		// A schema that does not compile refuses every change, as deploySafe records it.
		ev = verdict.InstallEvidence{Schema: true, Violations: []string{err.Error()}}
	}
	p.Schema, p.UnknownKeys, p.ProtectedKeys, p.Violations = ev.Schema, ev.UnknownKeys, ev.ProtectedKeys, ev.Violations
	p.Refused = len(ev.UnknownKeys)+len(ev.ProtectedKeys)+len(ev.Violations) > 0
	return p, nil
}

// artifactOf is the source that serves the rollout's artifact with digest, and its revision: the
// candidate's pinned source (digest empty: the candidate), the known-good's, or the tracked source.
// Any other digest is refused: the preview is of what this rollout would deploy.
func artifactOf(ctx context.Context, c client.Client, fr *v1alpha1.FleetRollout, digest string) (Ref, Revision, error) {
	ref := RolloutRef(fr.Namespace, fr.Name)
	cand := fr.Status.Candidate
	if digest == "" {
		if cand == nil || cand.Digest == "" {
			return Ref{}, Revision{}, Errorf(CodeInvalid, &ref, "%s has no candidate yet: give the digest of the artifact to check against", ref)
		}
		digest = cand.Digest
	}
	kind := fr.Spec.SourceRef.Kind
	for _, r := range []*v1alpha1.RevisionStatus{cand, fr.Status.LastKnownGood} {
		if r != nil && r.Digest == digest && r.Source != "" {
			return Ref{Kind: kind, Namespace: fr.Namespace, Name: r.Source}, Revision{Revision: r.Revision, Digest: r.Digest}, nil
		}
	}
	tracked := Ref{Kind: kind, Namespace: fr.Namespace, Name: fr.Spec.SourceRef.Name}
	a, _, err := artifactURL(ctx, c, tracked)
	if err == nil && a.Digest == digest {
		return tracked, a, nil
	}
	serves := "what " + tracked.String() + " serves now (" + a.Digest + ")"
	if err != nil {
		serves = tracked.String() + "'s artifact (" + err.Error() + ")"
	}
	var known []string
	for _, r := range []*v1alpha1.RevisionStatus{cand, fr.Status.LastKnownGood} {
		if r != nil && r.Digest != "" {
			known = append(known, r.Digest)
		}
	}
	return Ref{}, Revision{}, Errorf(CodeInvalid, &ref,
		"digest %s is not an artifact of %s: it is neither its candidate's nor its known-good's %v, nor %s", digest, ref, known, serves)
}

// artifactURL reads the artifact a GitRepository or OCIRepository reports: its revision and
// digest, and the URL source-controller serves it at.
func artifactURL(ctx context.Context, c client.Client, src Ref) (Revision, string, error) {
	key := client.ObjectKey{Namespace: src.Namespace, Name: src.Name}
	var obj sourcev1.Source
	switch src.Kind {
	case sourcev1.GitRepositoryKind:
		obj = &sourcev1.GitRepository{}
	case sourcev1.OCIRepositoryKind:
		obj = &sourcev1.OCIRepository{}
	default:
		return Revision{}, "", Errorf(CodeInvalid, &src, "%s: only GitRepository and OCIRepository artifacts can be previewed", src)
	}
	if err := c.Get(ctx, key, obj.(client.Object)); err != nil {
		return Revision{}, "", AsError(err, src)
	}
	a := obj.GetArtifact()
	if a == nil || a.URL == "" {
		return Revision{}, "", Errorf(CodeUnavailable, &src, "%s serves no artifact (status.artifact is empty): is source-controller running, and the source Ready?", src)
	}
	return Revision{Revision: a.Revision, Digest: a.Digest}, a.URL, nil
}

// installSchema fetches the artifact src serves, checks it is art's digest, and returns the
// tidegate/install.cue at the rollout's path (nil when the package ships none).
func installSchema(ctx context.Context, c client.Client, hc *http.Client, fr *v1alpha1.FleetRollout, src Ref, art Revision) ([]byte, error) {
	served, url, err := artifactURL(ctx, c, src)
	if err != nil {
		return nil, err
	}
	if served.Digest != art.Digest {
		return nil, Errorf(CodeConflict, &src, "%s now serves %s, not %s: the pinned source was changed; run the preview again", src, served.Digest, art.Digest)
	}
	data, err := evidence.FetchArtifact(ctx, hc, url, art.Digest, maxPreviewArtifactBytes)
	switch {
	case errors.Is(err, evidence.ErrDigestMismatch):
		return nil, Errorf(CodeConflict, &src, "%s: %w", src, err)
	case errors.Is(err, evidence.ErrNotServed):
		return nil, Errorf(CodeUnavailable, &src, "%s: %w", src, err)
	case err != nil:
		return nil, Errorf(CodeUnavailable, &src, "%s: the artifact cannot be fetched from here: %w; source-controller's artifact URL is usually reachable only inside the cluster: run the preview where it is (or port-forward source-controller and use a kubeconfig through it)", src, err)
	}
	a, err := evidence.Extract(data, maxPreviewFiles, maxPreviewUnpacked)
	if err != nil {
		return nil, Errorf(CodeInternal, &src, "%s: %w", src, err)
	}
	b, err := a.FS.ReadFile(path.Join("/", fr.Spec.Path, install.SchemaPath))
	if err != nil {
		if a.FS.Exists(path.Join("/", fr.Spec.Path, install.SchemaPath)) {
			return nil, Errorf(CodeInternal, &src, "%s: reading %s: %w", src, install.SchemaPath, err)
		}
		return nil, nil
	}
	return b, nil
}

// PolicyPreview is a policy's decision over one receipt's recorded evidence, beside the decision
// the receipt records.
type PolicyPreview struct {
	Receipt Ref    `json:"receipt"`
	Gate    string `json:"gate"`
	Wave    string `json:"wave,omitempty"`
	// Recorded is the receipt's decision; Decision the previewed policy's, over the same evidence.
	Recorded PolicyOutcome `json:"recorded"`
	Decision PolicyOutcome `json:"decision"`
	// Changed is true when the previewed policy decides otherwise than the receipt records.
	Changed bool `json:"changed"`
}

// PolicyOutcome is one decision of a gate: Pass, Fail, Inconclusive, or, decided again by a
// policy that cannot decide the evidence, ResultInvalidPolicy.
type PolicyOutcome struct {
	Result       string   `json:"result"`
	Reasons      []string `json:"reasons,omitempty"`
	Limits       []string `json:"limits,omitempty"`
	PolicyDigest string   `json:"policyDigest"`
}

// PreviewPolicy decides the gate of receipt ns/name again, with the policy of files (the .cue files
// of one package, by name), over the evidence the receipt recorded. A policy that does not compile
// or cannot decide is CodeInvalid with its problems; a receipt whose evidence cannot be read (or
// that keeps only its digest) is CodeUnmet: nothing is decided over missing evidence.
func PreviewPolicy(ctx context.Context, c client.Client, ns, name string, files map[string][]byte) (PolicyPreview, error) {
	ref := receiptRef(ns, name)
	if name == "" {
		return PolicyPreview{}, Errorf(CodeInvalid, nil, "name the receipt whose evidence to decide over")
	}
	rc := &v1alpha1.GateReceipt{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, rc); err != nil {
		return PolicyPreview{}, AsError(err, ref)
	}
	p := PolicyPreview{Receipt: ref, Gate: rc.Spec.Gate, Wave: rc.Spec.Wave,
		Recorded: PolicyOutcome{Result: rc.Spec.Result, Reasons: rc.Spec.Reasons, Limits: rc.Spec.Limits, PolicyDigest: rc.Spec.PolicyDigest}}
	raw, err := ReceiptEvidence(ctx, c, rc)
	if err != nil {
		return p, err
	}
	if raw == nil {
		return p, Errorf(CodeUnmet, &ref, "gatereceipt %s/%s keeps only the digest of its evidence (%s), or none: there is nothing to decide over", ns, name, OrDash(rc.Spec.EvidenceDigest))
	}
	if len(files) == 0 {
		return p, Errorf(CodeInvalid, nil, "give the policy to preview: the .cue files of one package")
	}
	pol, err := verdict.LoadPolicy(files)
	if err != nil {
		var pe *verdict.PolicyError
		if errors.As(err, &pe) {
			return p, NewError(CodeInvalid, nil, "the policy is invalid: "+pe.Error(), err)
		}
		return p, Errorf(CodeInvalid, nil, "the policy: %w", err)
	}
	// The decision policy replay makes of each receipt, so the two never disagree.
	d := decideAgain(pol, &rc.Spec, raw)
	if d.Result == ResultInvalidPolicy {
		return p, Errorf(CodeInvalid, nil, "the policy cannot decide %s over the evidence of gatereceipt %s/%s: %s", rc.Spec.Gate, ns, name, strings.Join(d.Reasons, "; "))
	}
	p.Decision = PolicyOutcome{Result: d.Result, Reasons: d.Reasons, Limits: d.Limits, PolicyDigest: d.PolicyDigest}
	p.Changed = p.Decision.Result != p.Recorded.Result
	return p, nil
}
