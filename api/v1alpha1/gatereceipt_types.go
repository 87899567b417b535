package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GateReceiptKind is the kind of a GateReceipt.
const GateReceiptKind = "GateReceipt"

// The four confidence gates.
const (
	GateDeploySafe       = "deploySafe"
	GateNoDisruption     = "noDisruption"
	GateRollbackSafe     = "rollbackSafe"
	GateRollbackSucceeds = "rollbackSucceeds"
)

// GatePhase says when in a wave a gate is decided.
type GatePhase string

const (
	// GateBeforeWave gates are decided before a wave switches anything: one that fails blocks the
	// wave with nothing of it applied.
	GateBeforeWave GatePhase = "BeforeWave"
	// GateBeforeFirstWave gates are decided before the first wave only, as GateBeforeWave ones.
	GateBeforeFirstWave GatePhase = "BeforeFirstWave"
	// GateAfterSoak gates are decided once a switched wave has soaked: one that fails fails the wave.
	GateAfterSoak GatePhase = "AfterSoak"
)

// Gates is the registry of the gates: their names in the order a wave meets them. Every user of
// the list of gates reads it (the engine, the policy, the collector, the conditions, the CLI), so
// a new gate is added here once, with its phase in GatePhaseOf; the policy's schema of its
// evidence (verdict) and its collector (evidence/collector) are keyed by its name, and a test of
// each fails when the gate has none.
var Gates = []string{GateDeploySafe, GateRollbackSafe, GateRollbackSucceeds, GateNoDisruption}

// GatePhaseOf says when each gate of Gates is decided. rollbackSucceeds is also decided after
// the first wave's rollback rehearsal, over its timings, when the policy asks for one.
var GatePhaseOf = map[string]GatePhase{
	GateDeploySafe:       GateBeforeWave,
	GateRollbackSafe:     GateBeforeFirstWave,
	GateRollbackSucceeds: GateBeforeWave,
	GateNoDisruption:     GateAfterSoak,
}

// Gate results.
const (
	ResultPass = "Pass"
	ResultFail = "Fail"
	// ResultInconclusive: the evidence could not be collected in full (a member unreachable or
	// timing out, too few samples, a fetch that failed), and what was observed does not fail the
	// gate. It never advances a wave and never starts a rollback: the gate is decided again as the
	// evidence comes in, until the policy's settings.inconclusiveAfter turns it into a Fail.
	ResultInconclusive = "Inconclusive"
)

// Labels and annotations of receipts and of the ConfigMaps holding their evidence's parts.
const (
	// ContentDigestAnnotation holds the content digest a receipt was named after; `tidegate
	// receipts verify` recomputes it.
	ContentDigestAnnotation = "tidegate.dev/content-digest"
	// ReceiptLabel names, on a ConfigMap holding a part of a receipt's evidence, the receipt.
	ReceiptLabel = "tidegate.dev/receipt"
)

// GateReceiptSpec is the whole record of one gate decision. It cannot change once created.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a GateReceipt is immutable: create a new receipt instead of changing this one"
// +kubebuilder:validation:XValidation:rule="[has(self.evidence), has(self.evidenceGzip), has(self.evidenceParts)].filter(x, x).size() <= 1",message="a GateReceipt keeps its evidence one way: in evidence, evidenceGzip or evidenceParts"
type GateReceiptSpec struct {
	// gate decided.
	// +required
	// +kubebuilder:validation:Enum=deploySafe;noDisruption;rollbackSafe;rollbackSucceeds
	Gate string `json:"gate"`

	// rollout is the name of the FleetRollout, in the receipt's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	Rollout string `json:"rollout"`

	// wave the decision is about: the wave about to start, or the wave that soaked.
	// +optional
	Wave string `json:"wave,omitempty"`

	// candidate revision and artifact digest the decision is about.
	// +required
	Candidate RevisionStatus `json:"candidate"`

	// knownGood revision and digest the rollout would go back to; empty on a package's first rollout.
	// +optional
	KnownGood *RevisionStatus `json:"knownGood,omitempty"`

	// targets are the clusters the decision covers, sorted.
	// +optional
	Targets []string `json:"targets,omitempty"`

	// class, owner, cadence and blastRadius of the rollout at decision time.
	// +optional
	Class string `json:"class,omitempty"`
	// +optional
	Owner string `json:"owner,omitempty"`
	// +optional
	Cadence string `json:"cadence,omitempty"`
	// +optional
	BlastRadius string `json:"blastRadius,omitempty"`

	// policyDigest is the sha256 of the policy that decided, or "builtin:<digest>" for the default policy.
	// +optional
	PolicyDigest string `json:"policyDigest,omitempty"`

	// approvals are the entries of the rollout's spec.approvals the decision relied on (an approval of
	// the candidate's irreversible changes, say).
	// +optional
	Approvals []Approval `json:"approvals,omitempty"`

	// evidence the policy was evaluated over, as JSON, when its encoding is at most 64 KiB. Larger
	// evidence is kept gzip-compressed, in evidenceGzip when it compresses to at most 32 KiB, else
	// in evidenceParts; one of the three holds it (receipts written before evidenceGzip existed
	// may hold none, only evidenceDigest).
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Evidence *apiextensionsv1.JSON `json:"evidence,omitempty"`

	// evidenceGzip is the evidence's JSON encoding, gzip-compressed, in standard base64, when the
	// encoding is larger than 64 KiB and compresses to at most 32 KiB. (A string rather than a
	// byte-formatted field: the API server's CEL reads byte fields as URL-safe base64, which would
	// break the immutability rule.)
	// +optional
	// +kubebuilder:validation:MaxLength=43692
	EvidenceGzip string `json:"evidenceGzip,omitempty"`

	// evidenceParts are, in order, the parts of the evidence's gzip-compressed JSON encoding when it
	// compresses to more than 32 KiB: each part is at most 256 KiB, kept in an immutable ConfigMap
	// of the receipt's namespace, owned by the receipt; the compressed stream is the parts' bytes
	// joined.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	EvidenceParts []EvidencePart `json:"evidenceParts,omitempty"`

	// evidenceDigest is the sha256 of the canonical JSON evidence: sorted keys, without its top-level
	// collectedAt, so the same evidence collected twice has one digest.
	// +required
	EvidenceDigest string `json:"evidenceDigest"`

	// result: Pass, Fail, or Inconclusive (evidence could not be collected in full, and what was
	// observed does not fail the gate).
	// +required
	// +kubebuilder:validation:Enum=Pass;Fail;Inconclusive
	Result string `json:"result"`

	// reasons for the result, sorted and de-duplicated, with CUE paths where the policy gave them.
	// +optional
	Reasons []string `json:"reasons,omitempty"`

	// limits say what this evidence does not establish.
	// +optional
	Limits []string `json:"limits,omitempty"`

	// evaluatedAt is when the decision was made.
	// +required
	EvaluatedAt metav1.Time `json:"evaluatedAt"`

	// signature, when the controller has a signing key (--receipt-signing-key), is a DSSE envelope
	// over an in-toto Statement whose subject is the candidate artifact and whose predicate is this
	// receipt's content (see docs/spec/v1alpha1/gatereceipts.md). A receipt without one is unsigned.
	// It is not part of the content digest.
	// +optional
	Signature *RecordSignature `json:"signature,omitempty"`
}

// RecordSignature is the signature of a receipt or of a ledger entry.
type RecordSignature struct {
	// keyID names the key that signed: the hex sha256 of its DER SubjectPublicKeyInfo.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	KeyID string `json:"keyID"`

	// envelope is the DSSE envelope, as JSON: payloadType application/vnd.in-toto+json, the
	// Statement in base64, and its signature by keyID.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=262144
	Envelope string `json:"envelope"`
}

// EvidencePart is one part of a receipt's compressed evidence, kept in a ConfigMap named after
// the part's digest.
type EvidencePart struct {
	// name of the ConfigMap, in the receipt's namespace: <receipt name>-<first 12 hex characters
	// of digest>. Its binaryData key evidence.gz holds the part.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// digest is the sha256 of the part's bytes, "sha256:<64 hex characters>".
	// +required
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	Digest string `json:"digest"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName={grc,gr},categories=tidegate
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.spec.rollout`
// +kubebuilder:printcolumn:name="Gate",type=string,JSONPath=`.spec.gate`
// +kubebuilder:printcolumn:name="Wave",type=string,JSONPath=`.spec.wave`
// +kubebuilder:printcolumn:name="Result",type=string,JSONPath=`.spec.result`
// +kubebuilder:printcolumn:name="Candidate",type=string,JSONPath=`.spec.candidate.revision`,priority=1
// +kubebuilder:printcolumn:name="Signed-By",type=string,JSONPath=`.spec.signature.keyID`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// GateReceipt is the immutable record of one gate decision. Its name carries a digest of its content,
// so the same decision made twice is recorded once.
// +kubebuilder:validation:XValidation:rule="has(self.spec)",message="a GateReceipt needs a spec"
type GateReceipt struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec GateReceiptSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// GateReceiptList is a list of GateReceipts.
type GateReceiptList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GateReceipt `json:"items"`
}

func init() {
	SchemeBuilder.Register(&GateReceipt{}, &GateReceiptList{})
}
