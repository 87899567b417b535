package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/ops"
	"github.com/tidegate/tidegate/test/testenv"
	"github.com/tidegate/tidegate/verdict"
)

// replayNS holds the rollouts and receipts the replay tests decide again.
const replayNS = "replay"

// provenanceCUE is the stricter policy's addition to the default: only verified sources reach the
// fleet (docs/policy.md, "Start from the default policy").
const provenanceCUE = `package policy

deploySafe: source: verified: true | error("the candidate's source is not verified: set verify on the source and sign its artifacts")
`

// decided is one gate decision the replay tests record: the gate, the wave and the evidence file
// under testdata/evidence (or, with limits, that evidence with many incompressible limits, which
// makes the receipt keep it in parts).
type decided struct {
	gate, wave, evidence string
	parts                bool
}

// recordDecisions creates rollout name in replayNS and writes a receipt of each decision as the
// controller does: decided by the built-in policy (controllers.CUEGates), built and written by
// controllers.BuildReceipt and WriteReceipt. It returns the receipts by wave and gate.
func recordDecisions(ctx context.Context, t *testing.T, name string, decisions []decided) map[string]*controllers.ReceiptObjects {
	t.Helper()
	if err := namespace(ctx, replayNS); err != nil {
		t.Fatal(err)
	}
	fr := &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: replayNS},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: "GitRepository", Name: "fleet-repo"},
			Waves:     []v1alpha1.Wave{{Name: "canary", Count: new(int32(1))}, {Name: "ring-1", Count: new(int32(1))}, {Name: "everyone", Selector: &metav1.LabelSelector{}}},
		},
	}
	if err := k8s.Create(ctx, fr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), fr) })
	fr.Status.Candidate, fr.Status.LastKnownGood = webCandidate, webKnownGood
	out := map[string]*controllers.ReceiptObjects{}
	for i, dc := range decisions {
		raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "testdata", "evidence", dc.gate, dc.evidence))
		if err != nil {
			t.Fatal(err)
		}
		if dc.parts {
			raw = withLimits(t, raw, 100)
		}
		wave := &v1alpha1.WaveStatus{Name: dc.wave}
		d, err := controllers.CUEGates{}.Evaluate(ctx, controllers.GateRequest{Gate: dc.gate, Rollout: fr, Wave: wave, Policy: verdict.DefaultPolicy(), Evidence: json.RawMessage(raw)})
		if err != nil {
			t.Fatal(err)
		}
		ro, err := controllers.BuildReceipt(fr, wave, []string{"member-1", "member-2"}, dc.gate, d, nil, at(1+i, 0))
		if err != nil {
			t.Fatal(err)
		}
		if dc.parts != (len(ro.Parts) > 0) {
			t.Fatalf("%s %s: %d parts", dc.wave, dc.gate, len(ro.Parts))
		}
		if err := controllers.WriteReceipt(ctx, k8s, ro, controllers.ReceiptAuthor{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = k8s.Delete(context.Background(), ro.GateReceipt)
			for _, p := range ro.Parts {
				_ = k8s.Delete(context.Background(), p)
			}
		})
		out[dc.wave+"/"+dc.gate] = ro
	}
	return out
}

// withLimits adds n limits of 1,000 pseudo-random hex characters to an evidence document: JSON
// that compresses to more than a receipt keeps in itself.
func withLimits(t *testing.T, raw []byte, n int) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	limits, _ := doc["limits"].([]any)
	seed := sha256.Sum256([]byte("replay"))
	for i := 0; i < n; i++ {
		var b strings.Builder
		for b.Len() < 1000 {
			seed = sha256.Sum256(seed[:])
			b.WriteString(hex.EncodeToString(seed[:]))
		}
		limits = append(limits, b.String()[:1000])
	}
	doc["limits"] = limits
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// strictPolicy writes the built-in policy with provenanceCUE into a directory and returns it.
func strictPolicy(t *testing.T) (dir string, files map[string]string) {
	t.Helper()
	def, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "verdict", "policy", "default.cue"))
	if err != nil {
		t.Fatal(err)
	}
	files = map[string]string{"default.cue": string(def), "provenance.cue": provenanceCUE}
	dir = t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir, files
}

// webDecisions are five decisions of one rollout under the built-in policy: four Pass (one of them
// over an unverified source, one over evidence kept in parts) and one Fail.
var webDecisions = []decided{
	{gate: v1alpha1.GateDeploySafe, wave: "canary", evidence: "pass.json"},
	{gate: v1alpha1.GateNoDisruption, wave: "canary", evidence: "pass.json"},
	{gate: v1alpha1.GateDeploySafe, wave: "ring-1", evidence: "pass-unverified.json"},
	{gate: v1alpha1.GateNoDisruption, wave: "ring-1", evidence: "fail-availability.json"},
	{gate: v1alpha1.GateNoDisruption, wave: "everyone", evidence: "pass.json", parts: true},
}

// TestReplay decides a rollout's recorded receipts again: under the built-in policy that decided
// them nothing changes (exit 0); under a stricter one exactly the deploySafe decision over the
// unverified source does (exit 1), Pass to Fail with the stricter policy's reason. A receipt whose
// evidence part is gone is unreadable and fails the replay; an unknown rollout is a usage error
// naming it.
func TestReplay(t *testing.T) {
	ctx := hub(t)
	receipts := recordDecisions(ctx, t, "replay-web", webDecisions)
	builtin := filepath.Join(testenv.RepoRoot(), "verdict", "policy")
	strictDir, _ := strictPolicy(t)

	same := tidegate(ctx, "-n", replayNS, "policy", "replay", "--rollout", "replay-web", "--policy", builtin)
	t.Logf("replay under the built-in policy:\n%s", same.stdout)
	expectRun(t, same, exitOK, "5 receipts of fleetrollout replay/replay-web replayed with "+policyDigest(t, builtin)+": 0 changed, 0 unreadable\n", "")

	stricter := tidegate(ctx, "-n", replayNS, "policy", "replay", "--rollout", "replay-web", "--policy", strictDir)
	t.Logf("replay under the stricter policy:\n%s", stricter.stdout)
	changed := receipts["ring-1/deploySafe"]
	reason := "deploySafe.source.verified: the candidate's source is not verified: set verify on the source and sign its artifacts"
	if stricter.code != exitNo || stricter.stderr != "" {
		t.Errorf("exit %d, stderr %q; want 1 and nothing", stricter.code, stricter.stderr)
	}
	for _, line := range []string{
		changed.Name + "   deploySafe   ring-1   " + v1alpha1.ShortRevision(webCandidate.Revision) + "   Pass   Fail",
		changed.Name + ": Pass -> Fail\n  new reasons:\n    - " + reason + "\n",
		"5 receipts of fleetrollout replay/replay-web replayed with " + policyDigest(t, strictDir) + ": 1 changed, 0 unreadable\n",
	} {
		if !strings.Contains(stricter.stdout, line) {
			t.Errorf("the replay does not say\n%s\nit says:\n%s", line, stricter.stdout)
		}
	}
	var r ops.Replay
	asJSON := tidegate(ctx, "-n", replayNS, "policy", "replay", "--rollout", "replay-web", "--policy", strictDir, "-o", "json")
	if err := json.Unmarshal([]byte(asJSON.stdout), &r); err != nil || asJSON.code != exitNo {
		t.Fatalf("exit %d, -o json: %v\n%s", asJSON.code, err, asJSON.stdout)
	}
	expectReplay(t, r, changed.Name, reason)

	// A part of a receipt's evidence is gone: nobody can say what the policy would decide.
	lost := recordDecisions(ctx, t, "replay-lost", []decided{{gate: v1alpha1.GateNoDisruption, wave: "everyone", evidence: "pass.json", parts: true}})
	ro := lost["everyone/noDisruption"]
	if err := k8s.Delete(ctx, ro.Parts[0]); err != nil {
		t.Fatal(err)
	}
	unreadable := tidegate(ctx, "-n", replayNS, "policy", "replay", "--rollout", "replay-lost", "--policy", builtin)
	t.Logf("replay of a receipt whose part is gone:\n%s", unreadable.stdout)
	if unreadable.code != exitNo ||
		!strings.Contains(unreadable.stdout, ro.Name+": Pass, unreadable: the evidence cannot be read: part 0 (configmap "+ro.Parts[0].Name+"): not found\n") ||
		!strings.HasSuffix(unreadable.stdout, ": 0 changed, 1 unreadable\n") {
		t.Errorf("exit %d, want 1, and the receipt unreadable:\n%s%s", unreadable.code, unreadable.stdout, unreadable.stderr)
	}

	expectRun(t, tidegate(ctx, "-n", replayNS, "policy", "replay", "--rollout", "nope", "--policy", builtin), exitUsage, "", "error: fleetrollout replay/nope not found\n")
	invalid := tidegate(ctx, "-n", replayNS, "policy", "replay", "--rollout", "replay-web", "--policy", filepath.Join(testenv.RepoRoot(), "testdata", "policies", "syntax-error"))
	if invalid.code != exitUsage || !strings.Contains(invalid.stderr, "invalid policy: ") || !strings.Contains(invalid.stderr, "tidegate policy vet lists every problem") {
		t.Errorf("a policy that does not compile: exit %d, stderr %q", invalid.code, invalid.stderr)
	}
}

// TestReplayMCP replays through the MCP tool replay_policy, with the policy as files' content and
// as a directory, and gets Invalid and NotFound errors with the object.
func TestReplayMCP(t *testing.T) {
	ctx := hub(t)
	receipts := recordDecisions(ctx, t, "replay-mcp", webDecisions)
	_, files := strictPolicy(t)
	s := mcpStdio(ctx, t)

	var r ops.Replay
	if call(ctx, t, s, "replay_fleet_policy", map[string]any{"rollout": "replay-mcp", "namespace": replayNS, "policyFiles": files}, &r) {
		t.Fatalf("replay_policy failed: %+v", r)
	}
	expectReplay(t, r, receipts["ring-1/deploySafe"].Name, "deploySafe.source.verified: the candidate's source is not verified")
	var same ops.Replay
	if call(ctx, t, s, "replay_fleet_policy", map[string]any{"rollout": "replay-mcp", "namespace": replayNS, "policyDir": filepath.Join(testenv.RepoRoot(), "verdict", "policy")}, &same) ||
		same.Replayed != 5 || !same.OK() || len(same.Changes) != 0 {
		t.Errorf("replay_policy under the built-in policy: %+v, want 5 replayed and nothing changed", same)
	}
	for _, tc := range []struct {
		args map[string]any
		code ops.Code
		obj  *ops.Ref
		msg  string
	}{
		{map[string]any{"rollout": "replay-mcp", "namespace": replayNS}, ops.CodeInvalid, nil, "give the proposed policy as a directory"},
		{map[string]any{"rollout": "replay-mcp", "namespace": replayNS, "policyDir": "/nonexistent", "policyFiles": files}, ops.CodeInvalid, nil, "one of the two"},
		{map[string]any{"rollout": "replay-mcp", "namespace": replayNS, "policyFiles": map[string]string{"sub/policy.cue": provenanceCUE}}, ops.CodeInvalid, nil, `policy file "sub/policy.cue"`},
		{map[string]any{"rollout": "replay-mcp", "namespace": replayNS, "policyFiles": map[string]string{"policy.cue": provenanceCUE}}, ops.CodeInvalid, nil, "invalid policy"},
		{map[string]any{"rollout": "nope", "namespace": replayNS, "policyFiles": files}, ops.CodeNotFound, &ops.Ref{Kind: "fleetrollout", Namespace: replayNS, Name: "nope"}, "fleetrollout replay/nope not found"},
	} {
		var e mcpErrorBody
		if !call(ctx, t, s, "replay_fleet_policy", tc.args, &e) || e.Error.Code != tc.code || !strings.Contains(e.Error.Message, tc.msg) ||
			(tc.obj == nil) != (e.Error.Object == nil) || (tc.obj != nil && *e.Error.Object != *tc.obj) {
			t.Errorf("replay_policy %v: %+v, want %s about %v saying %q", tc.args, e, tc.code, tc.obj, tc.msg)
		}
	}
}

// expectReplay checks a replay of webDecisions under the stricter policy: five receipts, and only
// the deploySafe decision over the unverified source changed, Pass to Fail, for reason.
func expectReplay(t *testing.T, r ops.Replay, receipt, reason string) {
	t.Helper()
	if r.Replayed != 5 || r.Changed != 1 || r.Unreadable != 0 || r.OK() || len(r.Changes) != 1 {
		t.Fatalf("replay: %+v, want 5 receipts replayed and one changed", r)
	}
	ch := r.Changes[0]
	if ch.Receipt != receipt || ch.Gate != v1alpha1.GateDeploySafe || ch.Wave != "ring-1" || ch.Revision != webCandidate.Revision ||
		ch.Old.Result != v1alpha1.ResultPass || len(ch.Old.Reasons) != 0 || !strings.HasPrefix(ch.Old.PolicyDigest, "builtin:sha256:") ||
		ch.New == nil || ch.New.Result != v1alpha1.ResultFail || ch.New.PolicyDigest != r.PolicyDigest || len(ch.New.Reasons) != 1 || !strings.Contains(ch.New.Reasons[0], reason) {
		t.Errorf("change %+v (new %+v), want %s in ring-1 Pass -> Fail saying %q", ch, ch.New, receipt, reason)
	}
}

// policyDigest is the digest of the policy in dir.
func policyDigest(t *testing.T, dir string) string {
	t.Helper()
	p, err := ops.ProposedPolicy(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p.Digest()
}
