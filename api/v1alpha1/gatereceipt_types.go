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

// Gates lists the gates in the order a wave meets them.
var Gates = []string{GateDeploySafe, GateRollbackSafe, GateRollbackSucceeds, GateNoDisruption}

// Gate results.
const (
	ResultPass = "Pass"
	ResultFail = "Fail"
)

// GateReceiptSpec is the whole record of one gate decision. It cannot change once created.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a GateReceipt is immutable: create a new receipt instead of changing this one"
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

	// evidence the policy was evaluated over, when small enough to keep here.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Evidence *apiextensionsv1.JSON `json:"evidence,omitempty"`

	// evidenceDigest is the sha256 of the canonical JSON evidence: sorted keys, without its top-level
	// collectedAt, so the same evidence collected twice has one digest.
	// +required
	EvidenceDigest string `json:"evidenceDigest"`

	// result: Pass or Fail.
	// +required
	// +kubebuilder:validation:Enum=Pass;Fail
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
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=grc
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.spec.rollout`
// +kubebuilder:printcolumn:name="Gate",type=string,JSONPath=`.spec.gate`
// +kubebuilder:printcolumn:name="Wave",type=string,JSONPath=`.spec.wave`
// +kubebuilder:printcolumn:name="Result",type=string,JSONPath=`.spec.result`
// +kubebuilder:printcolumn:name="Candidate",type=string,JSONPath=`.spec.candidate.revision`,priority=1
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
