package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/verdict"
)

// wideNoDisruption is the noDisruption evidence of a soaked wave of n clusters, as the collector
// writes it: a few in six regions lost some availability.
func wideNoDisruption(n int) (verdict.NoDisruptionEvidence, []string) {
	r := rand.New(rand.NewSource(int64(n)))
	regions := []string{"eu-west-1", "eu-central-1", "us-east-1", "us-west-2", "ap-south-1", "ap-northeast-1"}
	cand := revision("web", "web v2")
	ev := verdict.NoDisruptionEvidence{
		Evidence: verdict.Evidence{Rollout: "scale/web", Wave: "rest", Candidate: verdict.Revision{Revision: cand.Revision, Digest: cand.Digest},
			CollectedAt: at(9, 0).Time, Limits: []string{"workload availability sampled every 5s; an outage shorter than the sample interval may be missed"}},
		Soak: "10m0s", SampleInterval: "5s", ExpectedSamples: 120,
	}
	for i := range n {
		name := fmt.Sprintf("%s-%05d", regions[i%len(regions)], i)
		ev.Targets = append(ev.Targets, name)
		c := verdict.ClusterContinuity{Name: name, Ready: true, Revision: cand.Revision, Samples: 118 + r.Intn(4), HealthChecks: verdict.HealthChecksPassed}
		c.ObservedSamples = c.Samples
		c.SetAvailability(true, 1, 0)
		if r.Intn(20) == 0 {
			c.SetAvailability(true, float64(9+r.Intn(3))/12, float64(r.Intn(30000))/1000)
		}
		ev.Clusters = append(ev.Clusters, c)
	}
	return ev, ev.Targets
}

// verifyJSON runs receipts verify -o json on one receipt and returns what it printed.
func verifyJSON(ctx context.Context, t *testing.T, ns, name string) (int, receiptVerification) {
	t.Helper()
	r := tidegate(ctx, "receipts", "verify", "-n", ns, name, "-o", "json")
	var out items[receiptVerification]
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || len(out.Items) != 1 {
		t.Fatalf("receipts verify %s -o json: %v\nstdout:\n%s\nstderr:\n%s", name, err, r.stdout, r.stderr)
	}
	return r.code, out.Items[0]
}

// storedSize is the JSON encoding of an object as the API server returns it.
func storedSize(ctx context.Context, t *testing.T, obj client.Object) int {
	t.Helper()
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// TestReceiptsAtFleetScale writes the receipts of noDisruption decisions over 1,000 and 5,000
// clusters to the hub, as the controller does (controllers.BuildReceipt and WriteReceipt), and
// checks where their evidence is kept, the size of every object, that tidegate receipts verify
// recomputes every digest from the evidence and that receipts evidence prints it; then that a
// changed, a missing and a rewritten part are each found.
func TestReceiptsAtFleetScale(t *testing.T) {
	ctx := hub(t)
	const ns = "scale"
	if err := namespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, UID: types.UID("7c1e8a52-0f7e-4a43-9d3b-2f1b6f0c9a11")}}
	fr.Status.Candidate = revision("web", "web v2")
	fr.Status.LastKnownGood = revision("web", "web v1")
	write := func(n int) *controllers.ReceiptObjects {
		ev, targets := wideNoDisruption(n)
		d := controllers.GateDecision{Result: v1alpha1.ResultPass, Evidence: ev, PolicyDigest: "builtin:" + digest("policy"), Limits: ev.Limits}
		ro, err := controllers.BuildReceipt(fr, &v1alpha1.WaveStatus{Name: "rest"}, targets, v1alpha1.GateNoDisruption, d, nil, at(9, 1))
		if err != nil {
			t.Fatal(err)
		}
		if err := controllers.WriteReceipt(ctx, k8s, ro, controllers.ReceiptAuthor{}); err != nil {
			t.Fatal(err)
		}
		return ro
	}

	for _, tc := range []struct {
		clusters int
		parts    bool
	}{{1000, false}, {5000, true}} {
		t.Run(fmt.Sprintf("%d clusters", tc.clusters), func(t *testing.T) {
			ro := write(tc.clusters)
			raw, err := json.Marshal(ro.Spec.Targets)
			if err != nil {
				t.Fatal(err)
			}
			rc := &v1alpha1.GateReceipt{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ro.Name}}
			size := storedSize(ctx, t, rc)
			t.Logf("%d clusters: receipt %d bytes (targets %d), evidence compressed in the receipt %d bytes, %d parts",
				tc.clusters, size, len(raw), len(rc.Spec.EvidenceGzip), len(rc.Spec.EvidenceParts))
			if size > v1alpha1.MaxReceiptObjectBytes {
				t.Errorf("the receipt is %d bytes, more than %d", size, v1alpha1.MaxReceiptObjectBytes)
			}
			if rc.Spec.Evidence != nil {
				t.Errorf("the evidence of %d clusters is kept as is in the receipt", tc.clusters)
			}
			if got := len(rc.Spec.EvidenceParts) > 0; got != tc.parts || (!tc.parts && rc.Spec.EvidenceGzip == "") {
				t.Errorf("%d clusters: %d compressed bytes in the receipt, %d parts; want parts: %v", tc.clusters, len(rc.Spec.EvidenceGzip), len(rc.Spec.EvidenceParts), tc.parts)
			}
			for _, p := range rc.Spec.EvidenceParts {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.Name}}
				size := storedSize(ctx, t, cm)
				t.Logf("part %s: %d bytes", p.Name, size)
				if size > v1alpha1.MaxReceiptObjectBytes {
					t.Errorf("part %s is %d bytes, more than %d", p.Name, size, v1alpha1.MaxReceiptObjectBytes)
				}
				if cm.Immutable == nil || !*cm.Immutable || len(cm.OwnerReferences) != 1 || cm.OwnerReferences[0].UID != rc.UID {
					t.Errorf("part %s: immutable %v, owners %+v; want immutable and owned by the receipt %s", p.Name, cm.Immutable, cm.OwnerReferences, rc.UID)
				}
			}

			code, v := verifyJSON(ctx, t, ns, ro.Name)
			if code != exitOK || !v.Verified {
				t.Fatalf("verify: exit %d, %+v", code, v)
			}
			checked := map[string]int{}
			for _, ch := range v.Checks {
				if ch.Result != checkMatch {
					t.Errorf("check %+v", ch)
				}
				checked[ch.Check]++
			}
			if checked["content-digest"] != 1 || checked["name"] != 1 || checked["evidence-digest"] != 1 || checked["evidence-part"] != len(rc.Spec.EvidenceParts) {
				t.Errorf("checks %v; want content-digest, name, evidence-digest and one per part", checked)
			}

			r := tidegate(ctx, "receipts", "evidence", "-n", ns, ro.Name)
			var printed verdict.NoDisruptionEvidence
			if err := json.Unmarshal([]byte(r.stdout), &printed); r.code != exitOK || err != nil {
				t.Fatalf("receipts evidence: exit %d, %v; stderr %s", r.code, err, r.stderr)
			}
			if d, err := v1alpha1.EvidenceDigest([]byte(r.stdout)); err != nil || d != ro.Spec.EvidenceDigest || len(printed.Clusters) != tc.clusters {
				t.Errorf("receipts evidence printed %d clusters with digest %s, want %d with %s (%v)", len(printed.Clusters), d, tc.clusters, ro.Spec.EvidenceDigest, err)
			}
		})
	}

	// The 5,000-cluster receipt, tampered with part by part.
	ro := write(5000)
	if len(ro.Parts) == 0 {
		t.Fatal("no parts to tamper with")
	}
	part := ro.Spec.EvidenceParts[0]
	original := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: part.Name}, original); err != nil {
		t.Fatal(err)
	}
	replace := func(data []byte) {
		t.Helper()
		if err := k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: part.Name}}); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
		if data == nil {
			return
		}
		cm := original.DeepCopy()
		cm.ResourceVersion, cm.UID, cm.CreationTimestamp = "", "", metav1.Time{}
		cm.BinaryData = map[string][]byte{v1alpha1.EvidencePartKey: data}
		if err := k8s.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	changed := append([]byte{}, original.BinaryData[v1alpha1.EvidencePartKey]...)
	changed[len(changed)/2] ^= 0x01

	for _, tc := range []struct {
		name   string
		data   []byte
		result string
		detail string
	}{
		{"a part changed", changed, checkMismatch, "part 0: configmap " + part.Name + ": recorded " + part.Digest + ", recomputed sha256:"},
		{"a part missing", nil, checkMissing, "part 0: configmap " + part.Name + " not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			replace(tc.data)
			code, v := verifyJSON(ctx, t, ns, ro.Name)
			if code != exitNo || v.Verified {
				t.Errorf("verify: exit %d, verified %v; want exit 1", code, v.Verified)
			}
			found := false
			for _, ch := range v.Checks {
				switch ch.Check {
				case "evidence-part":
					found = found || (ch.Result == tc.result && strings.HasPrefix(ch.Detail, tc.detail))
				case "content-digest", "evidence-digest":
					if ch.Result != checkMismatch || !strings.Contains(ch.Detail, "cannot recompute") {
						t.Errorf("%s: %+v; want a mismatch that cannot be recomputed", ch.Check, ch)
					}
				}
			}
			if !found {
				t.Errorf("no evidence-part check %s with %q: %+v", tc.result, tc.detail, v.Checks)
			}
			table := tidegate(ctx, "receipts", "verify", "-n", ns, ro.Name)
			if table.code != exitNo || !strings.Contains(table.stdout, tc.detail) || !strings.Contains(table.stdout, "NOT VERIFIED") {
				t.Errorf("verify table: exit %d\n%s", table.code, table.stdout)
			}
			if r := tidegate(ctx, "receipts", "evidence", "-n", ns, ro.Name); r.code != exitNo || !strings.Contains(r.stderr, "cannot be read: part 0 (configmap "+part.Name+")") {
				t.Errorf("receipts evidence of a tampered receipt: exit %d, stderr %s", r.code, r.stderr)
			}
		})
	}

	// The same decision written again, after its parts were lost: the parts are written again.
	t.Run("written again", func(t *testing.T) {
		for _, p := range ro.Spec.EvidenceParts {
			if err := k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.Name}}); client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
		}
		again := write(5000)
		if again.Name != ro.Name {
			t.Fatalf("the same decision is named %s, then %s", ro.Name, again.Name)
		}
		if code, v := verifyJSON(ctx, t, ns, ro.Name); code != exitOK || !v.Verified {
			t.Errorf("verify after writing again: exit %d, %+v", code, v)
		}
	})
}
