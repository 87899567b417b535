package attest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// In-toto Statement v1 and tidegate's predicate types.
const (
	StatementType = "https://in-toto.io/Statement/v1"
	// PredicateGateReceipt is the predicate type of a gate receipt's statement.
	PredicateGateReceipt = "https://tidegate.dev/attestation/gate-receipt/v1"
	// PredicateLedgerEntry is the predicate type of a ledger entry's statement.
	PredicateLedgerEntry = "https://tidegate.dev/attestation/ledger-entry/v1"
)

// Statement is an in-toto Statement v1.
type Statement struct {
	Type          string          `json:"_type"`
	Subject       []Subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

// Subject is an artifact a statement is about: the candidate's revision and artifact digest.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// ReceiptPredicate is the predicate of a gate receipt's statement: which receipt, its content
// digest, and its content (the spec without evidence, kept by digest, and without signature).
type ReceiptPredicate struct {
	Namespace     string                   `json:"namespace"`
	Name          string                   `json:"name"`
	ContentDigest string                   `json:"contentDigest"`
	Receipt       v1alpha1.GateReceiptSpec `json:"receipt"`
}

// LedgerEntryPredicate is the predicate of a ledger entry's statement, and, without digest, what
// the entry's digest is computed over: the ledger it belongs to and the entry (without digest and
// signature), whose previous chains it to the entry before it.
type LedgerEntryPredicate struct {
	Namespace string                  `json:"namespace"`
	Ledger    string                  `json:"ledger"`
	Rollout   string                  `json:"rollout"`
	Candidate v1alpha1.RevisionStatus `json:"candidate"`
	Entry     v1alpha1.LedgerEntry    `json:"entry"`
	Digest    string                  `json:"digest,omitempty"`
}

// candidateSubject is the statement subject for a candidate: its revision, by its artifact digest.
// A candidate source-controller refused (its signature did not verify) has no artifact: the
// subject is then the digest its revision names, the OCI manifest or the commit that was refused.
func candidateSubject(c v1alpha1.RevisionStatus) ([]Subject, error) {
	digest := c.Digest
	if digest == "" {
		digest = c.Revision[strings.LastIndex(c.Revision, "@")+1:]
	}
	alg, hexDigest, ok := strings.Cut(digest, ":")
	if !ok || alg == "" || hexDigest == "" {
		return nil, fmt.Errorf("candidate %q has no artifact digest (%q) to sign a statement about", c.Revision, c.Digest)
	}
	return []Subject{{Name: c.Revision, Digest: map[string]string{alg: hexDigest}}}, nil
}

// receiptPredicate is the predicate a receipt is signed with.
func receiptPredicate(rc *v1alpha1.GateReceipt) ReceiptPredicate {
	spec := rc.Spec.DeepCopy()
	spec.Evidence, spec.EvidenceGzip, spec.EvidenceParts, spec.Signature = nil, "", nil, nil
	return ReceiptPredicate{Namespace: rc.Namespace, Name: rc.Name, ContentDigest: rc.Annotations[v1alpha1.ContentDigestAnnotation], Receipt: *spec}
}

// statement is the JSON of the statement about subject with predicate.
func statement(subject []Subject, predicateType string, predicate any) ([]byte, error) {
	p, err := json.Marshal(predicate)
	if err != nil {
		return nil, err
	}
	return json.Marshal(Statement{Type: StatementType, Subject: subject, PredicateType: predicateType, Predicate: p})
}

// SignReceipt sets rc's spec.signature: a DSSE envelope over the statement of its content about its
// candidate, by s. rc must carry its content digest (v1alpha1.NewGateReceipt sets it).
func SignReceipt(s *Signer, rc *v1alpha1.GateReceipt) error {
	if rc.Annotations[v1alpha1.ContentDigestAnnotation] == "" {
		return fmt.Errorf("gatereceipt %s/%s has no content digest to sign", rc.Namespace, rc.Name)
	}
	subject, err := candidateSubject(rc.Spec.Candidate)
	if err != nil {
		return fmt.Errorf("signing gatereceipt %s/%s: %w", rc.Namespace, rc.Name, err)
	}
	payload, err := statement(subject, PredicateGateReceipt, receiptPredicate(rc))
	if err != nil {
		return fmt.Errorf("signing gatereceipt %s/%s: %w", rc.Namespace, rc.Name, err)
	}
	sig, err := signed(s, payload)
	if err != nil {
		return fmt.Errorf("signing gatereceipt %s/%s: %w", rc.Namespace, rc.Name, err)
	}
	rc.Spec.Signature = sig
	return nil
}

func signed(s *Signer, payload []byte) (*v1alpha1.RecordSignature, error) {
	env, err := SignEnvelope(s, PayloadTypeInToto, payload)
	if err != nil {
		return nil, err
	}
	enc, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	return &v1alpha1.RecordSignature{KeyID: s.KeyID(), Envelope: string(enc)}, nil
}

// SignedStatement is the in-toto statement a record's envelope carries, read without checking the
// signature (VerifyReceiptSignature checks it).
func SignedStatement(sig *v1alpha1.RecordSignature) (Statement, error) {
	var st Statement
	if sig == nil {
		return st, ErrUnsigned
	}
	env, err := DecodeEnvelope(sig.Envelope)
	if err != nil {
		return st, err
	}
	payload, err := env.DecodeB64Payload()
	if err != nil {
		return st, fmt.Errorf("the envelope's payload is not base64: %w", err)
	}
	if err := json.Unmarshal(payload, &st); err != nil {
		return st, fmt.Errorf("the signed payload is not an in-toto statement: %w", err)
	}
	return st, nil
}

// Errors of the signature checks, for callers that name what failed.
var (
	ErrUnsigned         = errors.New("unsigned: it was written with no signing key configured")
	ErrStatementSubject = errors.New("the signed statement is about another artifact")
	ErrStatementContent = errors.New("the signed statement does not match the record")
)

// VerifyReceiptSignature checks rc's signature with keys: the envelope verifies with the key it
// names, its payload is an in-toto statement of the gate-receipt predicate type about rc's
// candidate, and its predicate is rc's content. It returns the key id that signed.
func VerifyReceiptSignature(rc *v1alpha1.GateReceipt, keys *KeySet) (string, error) {
	if rc.Spec.Signature == nil {
		return "", ErrUnsigned
	}
	subject, err := candidateSubject(rc.Spec.Candidate)
	if err != nil {
		return "", err
	}
	return verifyStatement(rc.Spec.Signature, keys, subject, PredicateGateReceipt, receiptPredicate(rc))
}

func verifyStatement(sig *v1alpha1.RecordSignature, keys *KeySet, subject []Subject, predicateType string, predicate any) (string, error) {
	env, err := DecodeEnvelope(sig.Envelope)
	if err != nil {
		return "", err
	}
	if len(env.Signatures) != 1 || env.Signatures[0].KeyID != sig.KeyID {
		return "", fmt.Errorf("the envelope is not signed by key %s alone, as the record says", sig.KeyID)
	}
	if env.PayloadType != PayloadTypeInToto {
		return "", fmt.Errorf("the envelope's payload type is %q, not %q", env.PayloadType, PayloadTypeInToto)
	}
	id, payload, err := VerifyEnvelope(env, keys)
	if err != nil {
		return id, err
	}
	var st Statement
	if err := json.Unmarshal(payload, &st); err != nil {
		return id, fmt.Errorf("the signed payload is not an in-toto statement: %w", err)
	}
	if st.Type != StatementType || st.PredicateType != predicateType {
		return id, fmt.Errorf("%w: a %s statement of predicate type %s, not %s", ErrStatementContent, st.Type, st.PredicateType, predicateType)
	}
	if !jsonEqual(st.Subject, subject) {
		got, _ := json.Marshal(st.Subject)
		return id, fmt.Errorf("%w: %s", ErrStatementSubject, got)
	}
	if !jsonEqual(st.Predicate, predicate) {
		return id, ErrStatementContent
	}
	return id, nil
}

// jsonEqual is whether a and b have the same JSON, objects' keys in any order.
func jsonEqual(a, b any) bool {
	ca, err1 := canonical(a)
	cb, err2 := canonical(b)
	return err1 == nil && err2 == nil && bytes.Equal(ca, cb)
}

// canonical is v's JSON with objects' keys sorted (encoding/json sorts map keys).
func canonical(v any) ([]byte, error) {
	raw, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	var x any
	if err := json.Unmarshal(raw, &x); err != nil {
		return nil, err
	}
	return json.Marshal(x)
}

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
