package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
	"github.com/tidegate/tidegate/verdict"
)

// inspectNS holds the objects of the revision, explain and preview tests: rollout shop, its canary
// (eu-1) done and its wave rest (us-1) switched to the candidate, which us-1 failed to apply; two
// failed receipts decided by the built-in policy over real evidence; the candidate's artifact
// served by an HTTP server as source-controller serves it.
const inspectNS = "inspect"

// installSchema is the candidate package's tidegate/install.cue.
const installSchema = `package install

values: {
	replicas?: =~"^[0-9]+$"
	region?:   "eu" | "us"
}
protected: ["image"]
`

var inspect struct {
	// cand and good are the rollout's candidate and known-good; cand's digest is its artifact's.
	cand, good *v1alpha1.RevisionStatus
	// noDisruption failed for eu-1's availability; rollbackSafe for an unapproved irreversible change.
	noDisruption, rollbackSafe *v1alpha1.GateReceipt
	// otherDigest is what the tracked source reports, while its URL serves the candidate's content.
	otherDigest string
}

// inspectFixtures creates the objects of inspectNS for a test, and deletes them when it ends (the
// golden tests of -A list every namespace).
func inspectFixtures(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := createInspectFixtures(ctx, t); err != nil {
		t.Fatal(err)
	}
}

func createInspectFixtures(ctx context.Context, t *testing.T) error {
	if err := namespace(ctx, inspectNS); err != nil {
		return err
	}
	artifact, err := artifactTarball(map[string]string{
		"apps/shop/kustomization.yaml":   "resources: []\n",
		"apps/shop/tidegate/install.cue": installSchema,
		// Another package's schema: only the one at the rollout's path counts.
		"apps/other/tidegate/install.cue":    "protected: [\"replicas\"]\n",
		"README.md":                          "fleet\n",
		"apps/shop/tidegate/notes/readme.md": "not a schema\n",
	})
	if err != nil {
		return err
	}
	// Served as source-controller serves artifacts; nothing is served at /gone (storage lost).
	mux := http.NewServeMux()
	mux.HandleFunc("/gitrepository/inspect/candidate.tar.gz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(artifact) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	sum := sha256.Sum256(artifact)
	candRev := "main@sha1:" + commit("shop v2")
	inspect.cand = &v1alpha1.RevisionStatus{Revision: candRev, Digest: "sha256:" + hex.EncodeToString(sum[:]), Source: v1alpha1.PinnedSourceName("shop", candRev)}
	inspect.good = revision("shop", "shop v1")
	inspect.otherDigest = digest("shop v3")
	cand, good := inspect.cand, inspect.good

	noDisruption, err := decidedReceipt(verdict.GateNoDisruption, "canary", []string{"eu-1"}, func(ev map[string]any) {
		c := ev["clusters"].([]any)[0].(map[string]any)
		c["name"], c["revision"], c["minAvailableRatio"], c["unavailableSeconds"] = "eu-1", cand.Revision, 0.5, 42
	})
	if err != nil {
		return err
	}
	rollbackSafe, err := decidedReceipt(verdict.GateRollbackSafe, "canary", []string{"eu-1"}, func(ev map[string]any) {
		ev["irreversible"].([]any)[0].(map[string]any)["approved"] = false
	})
	if err != nil {
		return err
	}
	inspect.noDisruption, inspect.rollbackSafe = noDisruption, rollbackSafe

	candSource := pinnedSource(inspectNS, "shop", cand, at(0, 0))
	candSource.Status.Artifact.URL = srv.URL + "/gitrepository/inspect/candidate.tar.gz"
	goodSource := pinnedSource(inspectNS, "shop", good, at(0, 0))
	goodSource.Status.Artifact.URL = srv.URL + "/gone"
	tracked := pinnedSource(inspectNS, "shop", &v1alpha1.RevisionStatus{Revision: "main@sha1:" + commit("shop v3"), Digest: inspect.otherDigest, Source: "fleet-repo"}, at(9, 0))
	tracked.Labels = nil
	tracked.Status.Artifact.URL = candSource.Status.Artifact.URL

	// us-1 was switched to the candidate and failed to apply it: it still runs the known-good.
	failing := kustomization(inspectNS, "shop", "us-1", "rest", cand, false, at(8, 0))
	failing.Status.LastAppliedRevision = good.Revision

	objs := []client.Object{
		cluster(inspectNS, "eu-1", "eu", "v1.37.2", true, at(9, 30)),
		cluster(inspectNS, "us-1", "us", "v1.37.1", true, at(9, 30)),
		candSource, goodSource, tracked,
		kustomization(inspectNS, "shop", "eu-1", "canary", cand, true, at(2, 0)),
		failing,
		noDisruption, rollbackSafe,
		&v1alpha1.FleetRollout{
			ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: inspectNS},
			Spec: v1alpha1.FleetRolloutSpec{
				SourceRef: v1alpha1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: "fleet-repo"},
				Path:      "./apps/shop",
				Template: v1alpha1.KustomizationTemplate{PostBuild: &kustomizev1.PostBuild{
					Substitute: map[string]string{"region": "eu"},
				}},
				Waves: []v1alpha1.Wave{{Name: "canary", Count: new(int32(1))}, {Name: "rest", Selector: &metav1.LabelSelector{}}},
			},
			Status: v1alpha1.FleetRolloutStatus{
				ObservedGeneration: 1,
				Phase:              v1alpha1.PhaseHeld,
				CurrentWave:        "rest",
				Candidate:          cand,
				LastKnownGood:      good,
				Conditions: []metav1.Condition{
					cond(v1alpha1.ReadyCondition, metav1.ConditionFalse, v1alpha1.GateFailedReason, "wave canary: noDisruption failed", at(5, 0)),
				},
				Waves: []v1alpha1.WaveStatus{
					{Name: "canary", Phase: v1alpha1.WaveFailed, Clusters: []string{"eu-1"}, Updated: 1, Healthy: 0,
						Gates: []v1alpha1.GateOutcome{outcome(rollbackSafe, 1), outcome(noDisruption, 1)}},
					{Name: "rest", Phase: v1alpha1.WaveProgressing, Clusters: []string{"us-1"}, Updated: 1},
				},
			},
		},
	}
	for _, o := range objs {
		t.Cleanup(func() { _ = k8s.Delete(context.Background(), o) })
		switch o.(type) {
		case *v1alpha1.GateReceipt:
			if err := k8s.Create(ctx, o); err != nil {
				return fmt.Errorf("creating receipt %s: %w", o.GetName(), err)
			}
		default:
			if err := createWithStatus(ctx, o); err != nil {
				return err
			}
		}
	}
	return nil
}

// decidedReceipt is the receipt of the built-in policy's decision of gate over its example
// evidence for rollout shop's candidate, edited by edit: the reasons are the policy's own.
func decidedReceipt(gate, wave string, targets []string, edit func(map[string]any)) (*v1alpha1.GateReceipt, error) {
	var ev map[string]any
	if err := json.Unmarshal(verdict.ExampleEvidence(gate), &ev); err != nil {
		return nil, err
	}
	ev["rollout"], ev["wave"], ev["targets"] = inspectNS+"/shop", wave, targets
	ev["candidate"] = map[string]any{"revision": inspect.cand.Revision, "digest": inspect.cand.Digest}
	ev["knownGood"] = map[string]any{"revision": inspect.good.Revision, "digest": inspect.good.Digest}
	edit(ev)
	d, err := verdict.Evaluate(verdict.DefaultPolicy(), gate, ev)
	if err != nil {
		return nil, err
	}
	if d.Pass || len(d.Reasons) == 0 {
		return nil, fmt.Errorf("the built-in policy passed the %s fixture; it must fail it", gate)
	}
	return receipt(inspectNS, v1alpha1.GateReceiptSpec{
		Gate: gate, Rollout: "shop", Wave: wave, Candidate: *inspect.cand, KnownGood: inspect.good, Targets: targets,
		Class: v1alpha1.ClassUserWorkload, PolicyDigest: d.PolicyDigest, Result: v1alpha1.ResultFail, Reasons: d.Reasons,
		Limits: d.Limits, EvaluatedAt: at(5, 0),
	}, ev), nil
}

// artifactTarball is a gzipped tarball of files, laid out as source-controller packs an artifact.
func artifactTarball(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[n]))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeOut decodes a command's -o json output.
func decodeOut(t *testing.T, r cliResult, out any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.stdout), out); err != nil {
		t.Fatalf("decoding %q (stderr %q): %v", r.stdout, r.stderr, err)
	}
}

func TestClusterRevision(t *testing.T) {
	ctx := hub(t)
	inspectFixtures(ctx, t)
	cand, good := inspect.cand, inspect.good

	// us-1 was switched to the candidate and still runs the known-good: they do not agree.
	r := tidegate(ctx, "-n", inspectNS, "revision", "us-1", "-o", "json")
	var us ops.ClusterRevisions
	decodeOut(t, r, &us)
	if r.code != exitNo || len(us.Rollouts) != 1 {
		t.Fatalf("revision us-1: exit %d, %+v; want 1 and one rollout", r.code, us)
	}
	got := us.Rollouts[0]
	if got.Rollout != "shop" || got.Wave != "rest" || got.Agree || got.Desired == nil || got.Live == nil ||
		got.Desired.Revision != cand.Revision || got.Desired.Digest != cand.Digest || got.Desired.Role != "candidate" ||
		got.Desired.Source != (ops.Ref{Kind: sourcev1.GitRepositoryKind, Namespace: inspectNS, Name: cand.Source}) ||
		got.Live.LastAppliedRevision != good.Revision || got.Live.LastAttemptedRevision != cand.Revision || got.Live.Ready.Status != "False" ||
		!strings.Contains(got.Message, "the cluster still runs "+good.Revision) {
		t.Errorf("revision us-1: %+v\ndesired %+v\nlive %+v\nwant shop in wave rest, desired the candidate, live the known-good, not agreeing", got, got.Desired, got.Live)
	}

	// eu-1 runs what it should.
	r = tidegate(ctx, "-n", inspectNS, "revision", "eu-1", "--rollout", "shop")
	if r.code != exitOK || !strings.Contains(r.stdout, "shop      canary") || !strings.Contains(r.stdout, v1alpha1.ShortRevision(cand.Revision)+" (candidate)") ||
		!strings.HasSuffix(strings.TrimSpace(r.stdout), "yes") {
		t.Errorf("revision eu-1: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A cluster nothing refers to, and a rollout that does not exist.
	r = tidegate(ctx, "-n", inspectNS, "revision", "nowhere", "-o", "json")
	var missing mcpErrorBody
	decodeOut(t, r, &missing)
	if r.code != exitUsage || missing.Error.Code != ops.CodeNotFound || missing.Error.Object == nil || missing.Error.Object.Name != "nowhere" {
		t.Errorf("revision of a missing cluster: exit %d, %+v", r.code, missing)
	}
	if r := tidegate(ctx, "-n", inspectNS, "revision", "eu-1", "--rollout", "nope"); r.code != exitUsage || !strings.Contains(r.stderr, "fleetrollout inspect/nope not found") {
		t.Errorf("revision of a missing rollout: exit %d, %s", r.code, r.stderr)
	}

	// The MCP tool answers what the command prints.
	s := mcpStdio(ctx, t)
	var viaMCP ops.ClusterRevisions
	if call(ctx, t, s, "get_fleet_cluster_revision", map[string]any{"cluster": "us-1", "namespace": inspectNS}, &viaMCP) || !reflect.DeepEqual(normalized(t, viaMCP), normalized(t, us)) {
		t.Errorf("cluster_revision: %+v\nwant %+v", viaMCP, us)
	}
	var notFound mcpErrorBody
	if !call(ctx, t, s, "get_fleet_cluster_revision", map[string]any{"cluster": "nowhere", "namespace": inspectNS}, &notFound) || notFound.Error.Code != ops.CodeNotFound {
		t.Errorf("cluster_revision of a missing cluster: %+v", notFound)
	}
}

// normalized is v as its JSON decodes: times compare by their encoding.
func normalized(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestExplain(t *testing.T) {
	ctx := hub(t)
	inspectFixtures(ctx, t)
	nd := inspect.noDisruption

	r := tidegate(ctx, "-n", inspectNS, "receipts", "explain", nd.Name, "-o", "json")
	// Settings are written as a policy writes them ("1m0s"), which they do not decode from.
	var e struct {
		ops.Explanation
		Settings json.RawMessage `json:"settings"`
	}
	decodeOut(t, r, &e)
	if r.code != exitNo || e.Gate != verdict.GateNoDisruption || e.Result != v1alpha1.ResultFail || e.Policy != "built-in" ||
		e.PolicyDigest != verdict.DefaultPolicy().Digest() || !e.Current || len(e.Reasons) != len(nd.Spec.Reasons) {
		t.Fatalf("receipts explain %s: exit %d, %+v", nd.Name, r.code, e)
	}
	// Each reason the policy gave refers to the evidence field it constrains, with the recorded value.
	want := map[string]struct{ value, setting string }{
		"clusters.0.minAvailableRatio":  {"0.5", "settings.tolerances.minAvailableRatio"},
		"clusters.0.unavailableSeconds": {"42", "settings.tolerances.maxUnavailableSeconds"},
	}
	for _, er := range e.Reasons {
		w, ok := want[er.Path]
		if !ok {
			continue
		}
		delete(want, er.Path)
		if string(er.Value) != w.value || er.About != "clusters.0: eu-1" || er.Setting != w.setting || er.SettingValue == nil {
			t.Errorf("reason %q: path %s, value %s, about %q, setting %s = %v; want value %s, about eu-1, setting %s",
				er.Reason, er.Path, er.Value, er.About, er.Setting, er.SettingValue, w.value, w.setting)
		}
	}
	if len(want) > 0 {
		t.Errorf("no reason about %v in %+v", want, e.Reasons)
	}
	if !slices.ContainsFunc(e.ToPass, func(r ops.Remedy) bool { return r.Action == "retry" && r.Command == "tidegate -n inspect retry shop" }) ||
		!slices.ContainsFunc(e.ToPass, func(r ops.Remedy) bool {
			return r.Action == "policy" && strings.Contains(r.Command, "--receipt "+nd.Name)
		}) {
		t.Errorf("to pass: %+v, want a retry and a policy preview", e.ToPass)
	}

	// By rollout, gate and wave: the receipt the rollout's status records.
	r = tidegate(ctx, "-n", inspectNS, "receipts", "explain", "--rollout", "shop", "--gate", verdict.GateRollbackSafe, "--wave", "canary")
	approve := "tidegate -n inspect approve shop --revision " + inspect.cand.Revision + " --irreversible"
	if r.code != exitNo || !strings.Contains(r.stdout, "gatereceipt inspect/"+inspect.rollbackSafe.Name) ||
		!strings.Contains(r.stdout, "evidence irreversible.0.approved = false") || !strings.Contains(r.stdout, approve) {
		t.Errorf("receipts explain --rollout shop --gate rollbackSafe: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := tidegate(ctx, "-n", inspectNS, "receipts", "explain", "--rollout", "shop", "--gate", verdict.GateDeploySafe, "-o", "json"); r.code != exitUsage ||
		!strings.Contains(r.stdout, `"code": "NotFound"`) {
		t.Errorf("explain of a gate never decided: exit %d, %s", r.code, r.stdout)
	}

	// Evidence kept in parts that are gone cannot be explained: an error, not an explanation without values.
	big := map[string]any{"rollout": inspectNS + "/shop", "limits": []string{randomHex(t, 120<<10)}}
	raw, err := json.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	lost, parts, err := v1alpha1.NewGateReceipt(inspectNS, v1alpha1.GateReceiptSpec{
		Gate: verdict.GateNoDisruption, Rollout: "shop", Wave: "rest", Candidate: *inspect.cand, Result: v1alpha1.ResultFail,
		Reasons: []string{"noDisruption.clusters.0.ready: conflicting values true and false"}, EvaluatedAt: at(6, 0),
	}, raw)
	if err != nil || len(parts) == 0 {
		t.Fatalf("a receipt with evidence in parts: %v, %d parts", err, len(parts))
	}
	if err := k8s.Create(ctx, lost); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), lost) })
	var unread mcpErrorBody
	r = tidegate(ctx, "-n", inspectNS, "receipts", "explain", lost.Name, "-o", "json")
	if decodeOut(t, r, &unread); r.code != exitUsage || unread.Error.Code != ops.CodeUnmet || !strings.Contains(unread.Error.Message, parts[0].Name) {
		t.Errorf("explain of a receipt whose evidence parts are gone: exit %d, %+v", r.code, unread)
	}

	s := mcpStdio(ctx, t)
	var viaMCP struct {
		ops.Explanation
		Settings json.RawMessage `json:"settings"`
	}
	if call(ctx, t, s, "explain_fleet_gate", map[string]any{"rollout": "shop", "gate": verdict.GateNoDisruption, "namespace": inspectNS}, &viaMCP) ||
		!reflect.DeepEqual(normalized(t, viaMCP), normalized(t, e)) {
		t.Errorf("explain_gate: %+v\nwant %+v", viaMCP, e)
	}
	var invalid mcpErrorBody
	if !call(ctx, t, s, "explain_fleet_gate", map[string]any{"name": nd.Name, "gate": "noDisruption", "namespace": inspectNS}, &invalid) || invalid.Error.Code != ops.CodeInvalid {
		t.Errorf("explain_gate with a name and a gate: %+v, want Invalid", invalid)
	}

	// A rollout that waits for a wave's approval: explaining says how to give it.
	fr := &v1alpha1.FleetRollout{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: inspectNS, Name: "shop"}, fr); err != nil {
		t.Fatal(err)
	}
	fr.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForApproval, Wave: "rest", Message: "wave rest needs an approval"}
	if err := k8s.Status().Update(ctx, fr); err != nil {
		t.Fatal(err)
	}
	r = tidegate(ctx, "-n", inspectNS, "receipts", "explain", nd.Name)
	if want := "tidegate -n inspect approve shop --revision " + inspect.cand.Revision + " --wave rest --by NAME"; r.code != exitNo || !strings.Contains(r.stdout, want) {
		t.Errorf("explain while the rollout waits for an approval: exit %d, want %q in\n%s%s", r.code, want, r.stdout, r.stderr)
	}
}

func TestPreview(t *testing.T) {
	ctx := hub(t)
	inspectFixtures(ctx, t)

	// Install-time values against the candidate's tidegate/install.cue.
	r := tidegate(ctx, "-n", inspectNS, "preview", "values", "--rollout", "shop", "replicas=3", "-o", "json")
	var allowed ops.ValuesPreview
	decodeOut(t, r, &allowed)
	if r.code != exitOK || allowed.Refused || !allowed.Schema || allowed.Artifact.Digest != inspect.cand.Digest ||
		!reflect.DeepEqual(allowed.Values, map[string]string{"region": "eu", "replicas": "3"}) {
		t.Errorf("preview values replicas=3: exit %d, %+v (%s)", r.code, allowed, r.stderr)
	}
	r = tidegate(ctx, "-n", inspectNS, "preview", "values", "--rollout", "shop", "--digest", inspect.cand.Digest, "image=nginx:1.29", "region=ap", "color=blue")
	if r.code != exitNo || !strings.Contains(r.stdout, "protected keys:\n  - image\n") || !strings.Contains(r.stdout, "unknown keys:\n  - color\n") ||
		!strings.Contains(r.stdout, "violations:\n  - region: ") || !strings.Contains(r.stdout, "refused: deploySafe would refuse") {
		t.Errorf("preview values image=...: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A digest that is not the rollout's; the tracked source serving other content than it reports;
	// the known-good's artifact no longer served.
	var body mcpErrorBody
	r = tidegate(ctx, "-n", inspectNS, "preview", "values", "--rollout", "shop", "--digest", digest("elsewhere"), "replicas=3", "-o", "json")
	if decodeOut(t, r, &body); r.code != exitUsage || body.Error.Code != ops.CodeInvalid || !strings.Contains(body.Error.Message, "is not an artifact of fleetrollout inspect/shop") {
		t.Errorf("preview values at a digest not the rollout's: exit %d, %+v", r.code, body)
	}
	r = tidegate(ctx, "-n", inspectNS, "preview", "values", "--rollout", "shop", "--digest", inspect.otherDigest, "replicas=3", "-o", "json")
	if decodeOut(t, r, &body); r.code != exitUsage || body.Error.Code != ops.CodeConflict || !strings.Contains(body.Error.Message, "digest mismatch") {
		t.Errorf("preview values at a digest the source does not serve: exit %d, %+v", r.code, body)
	}
	r = tidegate(ctx, "-n", inspectNS, "preview", "values", "--rollout", "shop", "--digest", inspect.good.Digest, "replicas=3", "-o", "json")
	if decodeOut(t, r, &body); r.code != exitUsage || body.Error.Code != ops.CodeUnavailable || !strings.Contains(body.Error.Message, "404") {
		t.Errorf("preview values of an artifact no longer served: exit %d, %+v", r.code, body)
	}

	// A policy edit over a receipt's evidence: the built-in policy with a lower tolerance passes
	// what it failed. Unchanged, it decides as the receipt records.
	files := verdict.DefaultPolicyFiles()
	edited := map[string]string{}
	dir := t.TempDir()
	for name, src := range files {
		s := string(src)
		if strings.Contains(s, "minAvailableRatio:     0.9") {
			s = strings.Replace(s, "minAvailableRatio:     0.9", "minAvailableRatio:     0.4", 1)
			s = strings.Replace(s, "maxUnavailableSeconds: 30", "maxUnavailableSeconds: 60", 1)
		}
		edited[name] = s
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nd := inspect.noDisruption.Name
	r = tidegate(ctx, "-n", inspectNS, "preview", "policy", "--receipt", nd, "--policy", dir, "-o", "json")
	var pp ops.PolicyPreview
	decodeOut(t, r, &pp)
	if r.code != exitOK || pp.Decision.Result != v1alpha1.ResultPass || pp.Recorded.Result != v1alpha1.ResultFail || !pp.Changed ||
		pp.Decision.PolicyDigest == pp.Recorded.PolicyDigest {
		t.Errorf("preview policy with lower tolerances: exit %d, %+v", r.code, pp)
	}
	builtin := t.TempDir()
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(builtin, name), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r = tidegate(ctx, "-n", inspectNS, "preview", "policy", "--receipt", nd, "--policy", builtin)
	if r.code != exitNo || !strings.Contains(r.stdout, "unchanged: the policy decides as the receipt records") {
		t.Errorf("preview policy with the built-in policy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Nothing is decided over evidence the receipt does not keep.
	r = tidegate(ctx, "-n", "audit", "preview", "policy", "--receipt", audit.digestOnly, "--policy", builtin, "-o", "json")
	var none mcpErrorBody
	if decodeOut(t, r, &none); r.code != exitUsage || none.Error.Code != ops.CodeUnmet || !strings.Contains(none.Error.Message, "keeps only the digest of its evidence") {
		t.Errorf("preview policy over a receipt without evidence: exit %d, %+v", r.code, none)
	}

	// The MCP tool, both modes.
	s := mcpStdio(ctx, t)
	var refused ops.ValuesPreview
	if call(ctx, t, s, "preview_fleet_change", map[string]any{"mode": "values", "rollout": "shop", "namespace": inspectNS, "values": map[string]string{"image": "nginx"}}, &refused) ||
		!refused.Refused || !slices.Equal(refused.ProtectedKeys, []string{"image"}) {
		t.Errorf("preview values image=nginx over MCP: %+v", refused)
	}
	var ok ops.ValuesPreview
	if call(ctx, t, s, "preview_fleet_change", map[string]any{"mode": "values", "rollout": "shop", "namespace": inspectNS, "values": map[string]string{"replicas": "3"}}, &ok) ||
		!reflect.DeepEqual(normalized(t, ok), normalized(t, allowed)) {
		t.Errorf("preview values replicas=3 over MCP: %+v, want %+v", ok, allowed)
	}
	var mismatch mcpErrorBody
	if !call(ctx, t, s, "preview_fleet_change", map[string]any{"mode": "values", "rollout": "shop", "namespace": inspectNS, "digest": digest("elsewhere")}, &mismatch) ||
		mismatch.Error.Code != ops.CodeInvalid {
		t.Errorf("preview values at a digest not the rollout's over MCP: %+v", mismatch)
	}
	var viaMCP ops.PolicyPreview
	if call(ctx, t, s, "preview_fleet_change", map[string]any{"mode": "policy", "receipt": nd, "namespace": inspectNS, "policy": edited}, &viaMCP) ||
		!reflect.DeepEqual(normalized(t, viaMCP), normalized(t, pp)) {
		t.Errorf("preview policy over MCP: %+v, want %+v", viaMCP, pp)
	}
	var broken mcpErrorBody
	if !call(ctx, t, s, "preview_fleet_change", map[string]any{"mode": "policy", "receipt": nd, "namespace": inspectNS, "policy": map[string]string{"p.cue": "package policy\nnoDisruption: {"}}, &broken) ||
		broken.Error.Code != ops.CodeInvalid {
		t.Errorf("preview of a policy that does not compile over MCP: %+v", broken)
	}
}

// randomHex is n characters that do not compress.
func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
