package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RolloutLedgerKind is the kind of a RolloutLedger.
const RolloutLedgerKind = "RolloutLedger"

// MaxLedgerEntries bounds a ledger's entries. A revision whose record needs more continues it in a
// ledger of its own that names the full one (spec.continues): LedgerPartName.
const MaxLedgerEntries = 512

// Kinds of ledger entries.
const (
	LedgerEntryReceipt  = "Receipt"
	LedgerEntryApproval = "Approval"
	LedgerEntryOutcome  = "Outcome"
)

// Outcomes a ledger records: the rollout's phase at the end of a revision's run, or Superseded when
// a newer candidate took its place first.
const (
	OutcomeCompleted  = PhaseCompleted
	OutcomeRolledBack = PhaseRolledBack
	OutcomeHeld       = PhaseHeld
	OutcomeSuperseded = "Superseded"
	// OutcomeUnchanged is a revision that was not rolled out: it renders, for every cluster, what
	// the known-good (sameAs) does.
	OutcomeUnchanged = "Unchanged"
)

// RolloutLedgerSpec is the record of one revision's rollout: every receipt its decisions relied on,
// the approvals those counted and each outcome, in order, each entry chained to the one before it.
// Entries are only appended.
// +kubebuilder:validation:XValidation:rule="self.rollout == oldSelf.rollout && self.candidate == oldSelf.candidate",message="a RolloutLedger's rollout and candidate cannot change"
// +kubebuilder:validation:XValidation:rule="has(self.continues) == has(oldSelf.continues) && (!has(self.continues) || self.continues == oldSelf.continues)",message="a RolloutLedger's continues cannot change"
// +kubebuilder:validation:XValidation:rule="size(self.entries) >= size(oldSelf.entries)",message="a RolloutLedger's entries are only appended: none can be removed"
// +kubebuilder:validation:XValidation:rule="size(oldSelf.entries) == 0 || self.entries[size(oldSelf.entries)-1].digest == oldSelf.entries[size(oldSelf.entries)-1].digest",message="a RolloutLedger's entries are only appended: the entries it had keep their place"
type RolloutLedgerSpec struct {
	// rollout is the name of the FleetRollout, in the ledger's namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Rollout string `json:"rollout"`

	// candidate is the revision and artifact digest the ledger records the rollout of.
	// +required
	Candidate RevisionStatus `json:"candidate"`

	// continues names, for a ledger that continues a full one, that ledger and the digest of its last
	// entry, which this ledger's first entry names as its previous: the chain of digests runs on
	// from one ledger to the next.
	// +optional
	Continues *LedgerLink `json:"continues,omitempty"`

	// outcome is the outcome of the latest Outcome entry, when there is one.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Outcome string `json:"outcome,omitempty"`

	// entries, oldest first.
	// +optional
	// +kubebuilder:validation:MaxItems=512
	Entries []LedgerEntry `json:"entries,omitempty"`
}

// LedgerLink names a full ledger and the digest of its last entry.
type LedgerLink struct {
	// name of the RolloutLedger, in the same namespace.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// digest of its last entry.
	// +required
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	Digest string `json:"digest"`
}

// LedgerEntry is one entry of a ledger: a receipt, an approval or an outcome.
type LedgerEntry struct {
	// index of the entry, from 0.
	// +required
	// +kubebuilder:validation:Minimum=0
	Index int `json:"index"`

	// type: Receipt, Approval or Outcome.
	// +required
	// +kubebuilder:validation:Enum=Receipt;Approval;Outcome
	Type string `json:"type"`

	// at is when the entry was appended.
	// +required
	At metav1.Time `json:"at"`

	// receipt is, for a Receipt entry, the receipt a decision relied on.
	// +optional
	Receipt *LedgerReceipt `json:"receipt,omitempty"`

	// approval is, for an Approval entry, the approval (from spec.approvals) a receipt counted.
	// +optional
	Approval *Approval `json:"approval,omitempty"`

	// outcome is, for an Outcome entry, how the revision's run ended.
	// +optional
	Outcome *LedgerOutcome `json:"outcome,omitempty"`

	// previous is the digest of the entry before this one; empty for the first.
	// +optional
	// +kubebuilder:validation:MaxLength=71
	Previous string `json:"previous,omitempty"`

	// digest is the sha256 of the entry's JSON without digest and signature ("sha256:<hex>"): each
	// entry's digest covers the one before it, so the last digest covers the whole ledger.
	// +required
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	Digest string `json:"digest"`

	// signature, with a signing key configured: a DSSE envelope over an in-toto Statement whose
	// subject is the candidate artifact and whose predicate is the entry.
	// +optional
	Signature *RecordSignature `json:"signature,omitempty"`
}

// LedgerReceipt names a receipt by its content digest, with what it decided.
type LedgerReceipt struct {
	// name of the GateReceipt.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// contentDigest of the receipt (its tidegate.dev/content-digest).
	// +required
	// +kubebuilder:validation:MaxLength=71
	ContentDigest string `json:"contentDigest"`

	// gate, wave and result the receipt records.
	// +required
	// +kubebuilder:validation:MaxLength=32
	Gate string `json:"gate"`
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Wave string `json:"wave,omitempty"`
	// +required
	// +kubebuilder:validation:MaxLength=32
	Result string `json:"result"`
}

// LedgerOutcome is how a revision's run ended, and for Completed the gates its waves passed on.
type LedgerOutcome struct {
	// phase: Completed, RolledBack, Held, Superseded, or Unchanged (not rolled out: it renders
	// what the known-good sameAs does).
	// +required
	// +kubebuilder:validation:Enum=Completed;RolledBack;Held;Superseded;Unchanged
	Phase string `json:"phase"`

	// sameAs is, for Unchanged, the known-good revision whose render it is.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	SameAs string `json:"sameAs,omitempty"`

	// waves are the waves of the run with the receipts their gates were last decided by.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Waves []LedgerWave `json:"waves,omitempty"`

	// rollback is, for RolledBack, the reversal as it was executed and checked: the known-good it
	// went back to, the clusters seen Ready there, and the policy's checks run on them.
	// +optional
	Rollback *LedgerRollback `json:"rollback,omitempty"`
}

// LedgerRollback is a rollback as the ledger records it (from the rollout's status.rollback).
type LedgerRollback struct {
	// to is the known-good revision rolled back to.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	To string `json:"to"`

	// confirmed is how many clusters were seen Ready at the known-good.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Confirmed int32 `json:"confirmed,omitempty"`

	// unconfirmed are the clusters sent back whose readiness at the known-good was not seen by the
	// rollback's deadline; at most 100 are kept.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Unconfirmed []string `json:"unconfirmed,omitempty"`

	// checks are the functional checks run at the known-good on the clusters sent back, failed runs
	// first (status.rollback.checks).
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Checks []CheckRun `json:"checks,omitempty"`

	// unchecked are the checks that had not finished by the rollback's deadline, with why.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Unchecked []string `json:"unchecked,omitempty"`
}

// LedgerWave is one wave of an outcome: its phase and its gates' last decisions.
type LedgerWave struct {
	// name of the wave.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// phase of the wave at the outcome.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Phase string `json:"phase,omitempty"`

	// gates decided for the wave: each gate's result and receipt.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	Gates []LedgerGate `json:"gates,omitempty"`
}

// LedgerGate is a gate's last decision on a wave.
type LedgerGate struct {
	// +required
	// +kubebuilder:validation:MaxLength=32
	Gate string `json:"gate"`
	// +required
	// +kubebuilder:validation:MaxLength=32
	Result string `json:"result"`
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Receipt string `json:"receipt,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName={rl},categories=tidegate
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.spec.rollout`
// +kubebuilder:printcolumn:name="Candidate",type=string,JSONPath=`.spec.candidate.revision`
// +kubebuilder:printcolumn:name="Outcome",type=string,JSONPath=`.spec.outcome`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// RolloutLedger is the record of one revision's rollout: the receipts, approvals and outcomes, in
// order and chained by digest, so that a ledger exported with its receipts can be checked with no
// cluster at all (tidegate receipts export, tidegate receipts verify --bundle).
// +kubebuilder:validation:XValidation:rule="has(self.spec)",message="a RolloutLedger needs a spec"
type RolloutLedger struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec RolloutLedgerSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// RolloutLedgerList is a list of RolloutLedgers.
type RolloutLedgerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RolloutLedger `json:"items"`
}

func init() {
	SchemeBuilder.Register(&RolloutLedger{}, &RolloutLedgerList{})
}
