package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/verdict"
)

// Provenance on OCI, end to end: the package is a Flux OCI artifact in the fleet's registry,
// signed with a cosign key, and the rollout's OCIRepository asks source-controller to verify it
// (spec.verify, cosign, the public key in a Secret). v1 and v2 roll out on their digests through
// all four gates: each deploySafe receipt says the signature was verified for the candidate's very
// digest, the Kustomizations apply the digest-pinned sources (lastAppliedRevision sha256:<hex>
// where the tracked source says latest@sha256:<hex>) and noDisruption passes on them. An unsigned
// artifact and one signed with another key, each asked for with spec.revision, never reach a
// cluster: source-controller refuses them, deploySafe fails on the refusal with a signed receipt
// about that digest, and the canary is blocked before anything of it is applied. An unsigned push
// over the tracked tag is refused the same way, and the rollout at rest says it waits for its source.
func TestE2EOCIRolloutVerified(t *testing.T) {
	parallel(t)
	ctx, cancel := testContext(t, 10*time.Minute)
	defer cancel()
	s, _ := newFleetSetup(t, 2, demoPackage("v1"))
	signer, _, _, err := attest.GenerateKey(false)
	if err != nil {
		t.Fatal(err)
	}
	startTidegate(t, s, controllers.Options{Signer: signer})

	key, err := localfleet.NewCosignKey()
	if err != nil {
		t.Fatal(err)
	}
	other, err := localfleet.NewCosignKey()
	if err != nil {
		t.Fatal(err)
	}
	reg := s.f.Registry
	push := func(tag, version string, signWith *localfleet.CosignKey) localfleet.Artifact {
		t.Helper()
		a, err := localfleet.PushArtifact(reg.Host+"/"+s.ns+"/web:"+tag, version, demoPackage(version))
		if err != nil {
			t.Fatal(err)
		}
		if signWith != nil {
			if err := localfleet.Sign(a, signWith); err != nil {
				t.Fatal(err)
			}
		}
		return a
	}
	v1 := push("latest", "v1", key)

	pub := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cosign-pub", Namespace: s.ns}, Data: map[string][]byte{"cosign.pub": key.PublicPEM}}
	src := &sourcev1.OCIRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: s.ns},
		Spec: sourcev1.OCIRepositorySpec{
			URL:       reg.URL(s.ns + "/web"),
			Reference: &sourcev1.OCIRepositoryRef{Tag: "latest"},
			Insecure:  true,
			Interval:  metav1.Duration{Duration: 2 * time.Second},
			Verify:    &sourcev1.OCIRepositoryVerification{Provider: "cosign", SecretRef: &meta.LocalObjectReference{Name: pub.Name}},
		},
	}
	for _, o := range []client.Object{pub, src} {
		if err := s.f.Hub.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	fr := twoWaveRollout(s.ns)
	fr.Spec.SourceRef = v1alpha1.SourceReference{Kind: sourcev1.OCIRepositoryKind, Name: "web"}
	fr.Spec.Path = "./app"
	s.createRollout(ctx, t, fr, v1.Revision(), nil)

	v2 := push("latest", "v2", key)
	done := s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, v2.Revision())
	for _, gate := range v1alpha1.Gates {
		if !conditions.IsTrue(done, gate) {
			t.Errorf("%s should have passed for %s: %+v", gate, v2.Revision(), conditions.Get(done, gate))
		}
	}
	for _, m := range s.members {
		if v := s.memberVersion(ctx, m.Name); v != "v2" {
			t.Errorf("%s runs %q, want v2", m.Name, v)
		}
		ks := s.kustomization(t, "web", m.Name)
		if ks == nil || ks.Status.LastAppliedRevision != v2.Digest.String() {
			t.Errorf("%s's Kustomization applied %v, want the digest pin %s", m.Name, ks, v2.Digest)
		}
	}
	receipts := s.receiptsOf(ctx, t, "web", v2.Revision())
	for _, wave := range []string{"canary", "rest"} {
		rc := latestReceipt(receipts, v1alpha1.GateDeploySafe, wave)
		if rc == nil {
			t.Fatalf("no deploySafe receipt of %s for wave %s", v2.Revision(), wave)
		}
		ev := deploySafeEvidence(t, rc)
		if rc.Spec.Result != v1alpha1.ResultPass || !ev.Source.Verified || ev.Source.Verification != "cosign" || ev.Source.Revision != v2.Digest.String() {
			t.Errorf("deploySafe of %s, wave %s: %s, source %+v; want Pass, verified by cosign for %s", v2.Revision(), wave, rc.Spec.Result, ev.Source, v2.Digest)
		}
		if rc.Spec.Signature == nil {
			t.Errorf("receipt %s is not signed", rc.Name)
		}
	}

	// Unsigned, and signed with a key the source does not trust: refused, never applied.
	gen := s.generations(t, "web")
	for _, c := range []struct {
		version, why string
		signWith     *localfleet.CosignKey
	}{
		{"v3", "no matching signatures", nil},
		{"v4", "no matching signatures", other},
	} {
		a := push(c.version, c.version, c.signWith)
		s.setRevision(ctx, t, "web", a.Revision())
		refusedCtx, cancelRefused := testContext(t, 2*time.Minute)
		var fr *v1alpha1.FleetRollout
		var rc *v1alpha1.GateReceipt
		eventually(refusedCtx, t, c.version+": deploySafe decided on the canary", func() (bool, string) {
			fr = s.rollout(t, "web")
			rc = latestReceipt(s.receiptsOf(refusedCtx, t, "web", a.Revision()), v1alpha1.GateDeploySafe, "canary")
			return rc != nil && rc.Spec.Result != v1alpha1.ResultInconclusive && conditions.IsFalse(fr, v1alpha1.GateDeploySafe), describe(fr)
		})
		cancelRefused()
		ev := deploySafeEvidence(t, rc)
		if rc.Spec.Result != v1alpha1.ResultFail || ev.Source.Verified || ev.Source.Revision != "" || !strings.Contains(ev.Source.Message, c.why) ||
			!strings.Contains(strings.Join(rc.Spec.Reasons, "\n"), "verification") {
			t.Errorf("%s: deploySafe %s, source %+v, reasons %v; want Fail on the refused signature (%s)", c.version, rc.Spec.Result, ev.Source, rc.Spec.Reasons, c.why)
		}
		// The signed receipt is about the refused digest itself.
		if rc.Spec.Signature == nil {
			t.Fatalf("%s: receipt %s is not signed", c.version, rc.Name)
		}
		if _, err := attest.VerifyReceiptSignature(rc, attest.NewKeySet(signer.Public())); err != nil {
			t.Errorf("%s: receipt %s does not verify: %v", c.version, rc.Name, err)
		}
		if st := signedStatement(t, rc); len(st.Subject) != 1 || st.Subject[0].Digest["sha256"] != a.Digest.Hex {
			t.Errorf("%s: the signed statement of %s is about %+v, want digest %s", c.version, rc.Name, st.Subject, a.Digest)
		}
		if w := fr.Status.Waves; len(w) == 0 || w[0].StartedAt != nil {
			t.Errorf("%s: the canary should be blocked before it starts: %s", c.version, describe(fr))
		}
		s.nothingApplied(ctx, t, "web", a.Revision(), c.version)
	}
	if now := s.generations(t, "web"); !maps.Equal(gen, now) {
		t.Errorf("a refused artifact moved a Kustomization: generations %v, then %v", gen, now)
	}

	// Clearing spec.revision goes back to what the tag serves, the known-good: the rollout is
	// Completed again and nothing moved.
	s.setRevision(ctx, t, "web", "")
	eventually(ctx, t, "rollout web Completed at its known-good "+v2.Revision(), func() (bool, string) {
		fr := s.rollout(t, "web")
		kg := fr.Status.LastKnownGood
		return fr.Status.Phase == v1alpha1.PhaseCompleted && kg != nil && kg.Revision == v2.Revision(), describe(fr)
	})
	if now := s.generations(t, "web"); !maps.Equal(gen, now) {
		t.Errorf("going back to the known-good moved a Kustomization: generations %v, then %v", gen, now)
	}

	// An unsigned push over the tracked tag: source-controller refuses it and keeps serving v2,
	// nothing moves, and the rollout, Completed on v2, says it waits for the source and why. Once
	// the artifact is signed the source verifies it and the rollout takes it up.
	v5 := push("latest", "v5", nil)
	eventually(ctx, t, "rollout web waiting for its source, which refused "+v5.Revision(), func() (bool, string) {
		fr := s.rollout(t, "web")
		wf, ready := fr.Status.WaitingFor, conditions.Get(fr, meta.ReadyCondition)
		return fr.Status.Phase == v1alpha1.PhaseCompleted && wf != nil && wf.Reason == v1alpha1.WaitingForSource &&
			strings.Contains(wf.Message, "OCIRepository web refused the newest artifact of its reference and serves "+v2.Revision()) &&
			strings.Contains(wf.Message, "no matching signatures") &&
			ready != nil && ready.Status == metav1.ConditionTrue && strings.Contains(ready.Message, wf.Message), describe(fr)
	})
	if now := s.generations(t, "web"); !maps.Equal(gen, now) {
		t.Errorf("an unsigned push over the tag moved a Kustomization: generations %v, then %v", gen, now)
	}
	if err := localfleet.Sign(v5, key); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "rollout web taking up "+v5.Revision()+" once it is signed", func() (bool, string) {
		fr := s.rollout(t, "web")
		c, wf := fr.Status.Candidate, fr.Status.WaitingFor
		return c != nil && c.Revision == v5.Revision() && (wf == nil || wf.Reason != v1alpha1.WaitingForSource), describe(fr)
	})
}

func deploySafeEvidence(t *testing.T, rc *v1alpha1.GateReceipt) verdict.DeploySafeEvidence {
	t.Helper()
	raw, err := rc.Spec.StoredEvidence(nil)
	if err != nil {
		t.Fatal(err)
	}
	var ev verdict.DeploySafeEvidence
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatalf("receipt %s evidence: %v", rc.Name, err)
	}
	return ev
}

// signedStatement is the in-toto statement rc's envelope signs.
func signedStatement(t *testing.T, rc *v1alpha1.GateReceipt) attest.Statement {
	t.Helper()
	st, err := attest.SignedStatement(rc.Spec.Signature)
	if err != nil {
		t.Fatalf("receipt %s: %v", rc.Name, err)
	}
	return st
}

// setRevision sets the rollout's spec.revision ("" clears it).
func (s *fleetSetup) setRevision(ctx context.Context, t *testing.T, name, rev string) {
	t.Helper()
	fr := s.rollout(t, name)
	patch := client.MergeFrom(fr.DeepCopy())
	fr.Spec.Revision = rev
	if err := s.f.Hub.Patch(ctx, fr, patch); err != nil {
		t.Fatal(err)
	}
}
