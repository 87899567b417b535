package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/testbin"
)

// installSchema makes image a value the package fixes at build time: setting it at install time
// is a protected change, which deploySafe refuses.
const installSchema = `package install

values: {
	replicas?: =~"^[1-9][0-9]?$"
}
protected: ["image"]
`

// transcriptPackage is the demo package at version with its install schema.
func transcriptPackage(version string) map[string]string {
	files := demoPackage(version)
	files["app/tidegate/install.cue"] = installSchema
	return files
}

// The three entry paths, the tidegate CLI, the Flux CLI with the flux-fleet plugin and an MCP
// client over stdio, on one rollout's one candidate: each discovers the candidate and its digest,
// approves the wave that waits for it (the CLI canary, the plugin ring, the MCP client rest) and
// follows the job, is refused a protected install-time value with nothing applied, and asks a
// cluster for its desired and live revision. What they printed is docs/transcripts/{cli,
// flux-plugin,mcp}.md, normalised; the test fails when those are stale.
func TestE2ETranscripts(t *testing.T) {
	parallel(t)
	flux, err := testbin.FluxCLI()
	if err != nil {
		t.Fatal(err)
	}
	// Build before the fleet starts, so the compiler does not compete with the API servers. The
	// one binary is tidegate and, under $FLUXCD_PLUGINS, flux-fleet.
	bin, plugins := t.TempDir(), t.TempDir()
	tidegate := filepath.Join(bin, "tidegate")
	buildFluxPlugin(t, tidegate)
	if err := os.Symlink(tidegate, filepath.Join(plugins, "flux-fleet")); err != nil {
		t.Fatal(err)
	}

	// A fleet of its own: the transcripts name the fleet's namespace ("fleet") and the package's.
	s, first := newFleetSetupWith(t, 3, transcriptPackage("v1"), localfleet.Options{Namespace: "fleet"})
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 10*time.Minute)
	defer cancel()

	// web: three waves of one cluster each, every one waiting for an approval; v1 is approved in
	// the rollout as it is committed, v2 is approved wave by wave from the three entry paths.
	rev1 := s.repo.Revision(first)
	fr := threeWaveRollout(s.ns, "web")
	fr.Spec.Template.TargetNamespace = "" // the package's own namespace, as the transcripts show it
	one := int32(1)
	fr.Spec.Waves[1].Percent, fr.Spec.Waves[1].Count = nil, &one
	for i := range fr.Spec.Waves {
		fr.Spec.Waves[i].RequireApproval = true
	}
	fr.Spec.Approvals = []v1alpha1.Approval{{Revision: rev1, By: "release-bot", Reason: "the first release"}}
	if err := s.f.Hub.Create(ctx, fr); err != nil {
		t.Fatal(err)
	}
	s.waitPhase(ctx, t, "web", v1alpha1.PhaseCompleted, rev1)
	// v1's approval has done its work: it goes now, as the controller would prune it once v2
	// completes, so that no transcript races that pruning (a spec write, a new generation).
	s.patchRollout(ctx, t, "web", func(fr *v1alpha1.FleetRollout) { fr.Spec.Approvals = nil })
	sha2, err := s.repo.Commit("v2", transcriptPackage("v2"), nil)
	if err != nil {
		t.Fatal(err)
	}
	rev2 := s.repo.Revision(sha2)
	fr = s.waitApproval(ctx, t, "canary", rev2)
	cand, kg := *fr.Status.Candidate, *fr.Status.LastKnownGood
	if cand.Digest == "" || kg.Digest == "" || kg.Revision != rev1 {
		t.Fatalf("want the candidate %s and the known-good %s, both with digests: %s", rev2, rev1, describe(fr))
	}
	norm := newNormaliser()
	norm.name("candidate-commit", strings.TrimPrefix(cand.Revision, "main@sha1:"))
	norm.name("candidate-digest", cand.Digest)
	norm.name("known-good-commit", strings.TrimPrefix(kg.Revision, "main@sha1:"))
	norm.name("known-good-digest", kg.Digest)
	// A wave's clusters are planned when it starts: ask the rollout as it is now.
	member := func(wave string) string {
		t.Helper()
		fr := s.rollout(t, "web")
		for _, w := range fr.Status.Waves {
			if w.Name == wave && len(w.Clusters) == 1 {
				return w.Clusters[0]
			}
		}
		t.Fatalf("wave %s has not one cluster: %s", wave, describe(fr))
		return ""
	}
	env := []string{"KUBECONFIG=" + s.f.HubKubeConfigPath, "FLUXCD_PLUGINS=" + plugins}

	t.Run("cli", func(t *testing.T) {
		tr := newTranscript("cli.md", "Transcript: the tidegate CLI", transcriptIntro("the tidegate command line", "the canary"), norm)
		run := expectExit(ctx, t, env, tidegate)
		tr.section("Discovering the candidate", "The rollouts of the namespace, with the digests of the candidate and the known-good, and the one rollout wave by wave: wave canary waits for an approval of the candidate.")
		args := []string{"get", "rollouts", "-n", s.ns, "-o", "wide"}
		r := run(0, args...)
		tr.command("tidegate "+shellJoin(args), r)
		expectLine(t, r.stdout, "web", v1alpha1.PhaseProgressing, "canary", v1alpha1.ShortRevision(cand.Revision), v1alpha1.ShortRevision(kg.Revision))
		expectContains(t, r.stdout, cand.Digest[:len("sha256:")+12])
		args = []string{"status", "web", "-n", s.ns}
		r = run(0, args...) // Ready Unknown: it waits for an approval
		tr.command("tidegate "+shellJoin(args), r)
		expectContains(t, r.stdout, "candidate:   "+cand.Revision)

		tr.section("An allowed change: approving the wave that waits", "The approval names the candidate by the first characters of its digest, which expand to its revision; --wait follows the job until the rollout settles or pauses for the next approval. The approval records --by beside the user the API server authenticated the command as.")
		short := cand.Digest[:len("sha256:")+12]
		args = []string{"approve", "web", "-n", s.ns, "--revision", short, "--wave", "canary", "--by", "alice", "--reason", "release review", "--wait"}
		r = run(0, args...)
		r.stderr = lastProgress(r.stderr)
		tr.command("tidegate "+shellJoin(args), r)
		expectContains(t, r.stderr, "AwaitingApproval", "(wave ring)")
		s.expectApproved(t, rev2, "canary", "alice")

		s.transcribeRefusal(t, tr, func(args ...string) cmdResult { return run(1, args...) }, "tidegate")
		tr.section("Desired and live revision of a cluster", "The canary's cluster runs the candidate: the revision its Kustomization asks for and the one kustomize-controller applied agree.")
		args = []string{"revision", member("canary"), "-n", s.ns}
		r = run(0, args...)
		tr.command("tidegate "+shellJoin(args), r)
		expectLine(t, r.stdout, "web", "canary", v1alpha1.ShortRevision(cand.Revision), "(candidate)")
		tr.check(t)
	})
	if t.Failed() {
		return
	}

	t.Run("flux-plugin", func(t *testing.T) {
		tr := newTranscript("flux-plugin.md", "Transcript: the flux fleet plugin", transcriptIntro("the Flux CLI (v2.9, with tidegate installed as its plugin flux-fleet)", "wave ring"), norm)
		fluxRun := expectExit(ctx, t, env, flux)
		tr.section("Discovering the candidate", "The Flux CLI finds the plugin in $FLUXCD_PLUGINS; flux fleet status shows the rollout wave by wave, flux fleet tree every member's Kustomization under the pinned source of the revision it runs.")
		r := fluxRun(0, "plugin", "list")
		r.stdout = strings.ReplaceAll(r.stdout, plugins, "$FLUXCD_PLUGINS")
		tr.command("flux plugin list", r)
		expectLine(t, r.stdout, "fleet", "manual", "$FLUXCD_PLUGINS/flux-fleet")
		args := []string{"fleet", "status", "web", "-n", s.ns}
		r = fluxRun(0, args...)
		tr.command("flux "+shellJoin(args), r)
		expectContains(t, r.stdout, "fleetrollout "+s.ns+"/web", "candidate:   "+cand.Revision)
		// A wave's members are planned when it starts.
		expectLine(t, r.stdout, "canary", v1alpha1.WaveSucceeded, "1")
		expectLine(t, r.stdout, "ring", v1alpha1.WaveAwaiting, "0")
		expectLine(t, r.stdout, "rest", v1alpha1.WavePending, "0")
		args = []string{"fleet", "tree", "web", "-n", s.ns}
		r = fluxRun(0, args...)
		tr.command("flux "+shellJoin(args), r)
		for _, m := range s.members {
			rev := kg.Revision
			if m.Name == member("canary") {
				rev = cand.Revision
			}
			want := fmt.Sprintf("Kustomization/%s/%s (wave ", s.ns, v1alpha1.KustomizationName("web", m.Name))
			if !hasLineContaining(r.stdout, want, rev+", Ready=True)") {
				t.Errorf("flux fleet tree does not show %s at %s, Ready:\n%s", want, rev, r.stdout)
			}
		}
		if r := fluxRun(0, "fleet", "status", "--help"); !strings.Contains(r.stdout, "flux fleet status ROLLOUT") {
			t.Errorf("flux fleet status --help does not name `flux fleet status`:\n%s", r.stdout)
		}

		tr.section("An allowed change: approving the wave that waits", "The approval names the candidate by the first characters of its commit.")
		args = []string{"fleet", "approve", "web", "-n", s.ns, "--revision", strings.TrimPrefix(cand.Revision, "main@sha1:")[:12], "--wave", "ring", "--by", "bob", "--wait"}
		r = fluxRun(0, args...)
		r.stderr = lastProgress(r.stderr)
		tr.command("flux "+shellJoin(args), r)
		expectContains(t, r.stderr, "AwaitingApproval", "(wave rest)")
		s.expectApproved(t, rev2, "ring", "bob")

		s.transcribeRefusal(t, tr, func(args ...string) cmdResult { return fluxRun(1, append([]string{"fleet"}, args...)...) }, "flux fleet")
		tr.section("Desired and live revision of a cluster", "Wave ring's cluster, from the plugin and from Flux's own view of the Kustomizations the rollout labels (flux get shortens each SHA to 8 digits).")
		args = []string{"fleet", "revision", member("ring"), "-n", s.ns}
		r = fluxRun(0, args...)
		tr.command("flux "+shellJoin(args), r)
		expectLine(t, r.stdout, "web", "ring", v1alpha1.ShortRevision(cand.Revision), "(candidate)")
		args = []string{"get", "kustomizations", "-n", s.ns, "-l", v1alpha1.RolloutLabel + "=web"}
		ready := func(out string) (bool, string) {
			for _, m := range s.members {
				rev := shortRevision(kg.Revision)
				if m.Name == member("canary") || m.Name == member("ring") {
					rev = shortRevision(cand.Revision)
				}
				if !hasLineWithFields(out, v1alpha1.KustomizationName("web", m.Name), rev, "False", "True", "Applied", "revision:", rev) {
					return false, out
				}
			}
			return true, ""
		}
		// kustomize-controller reconciles each Kustomization every interval, and shows it Unknown
		// ("Reconciliation in progress") meanwhile: the session is the one that caught none of them
		// mid-reconcile, as a person would run it again.
		eventually(ctx, t, "flux get kustomizations shows every cluster Ready at its revision", func() (bool, string) {
			r = fluxRun(0, args...)
			return ready(r.stdout)
		})
		tr.command("flux "+shellJoin(args), r)
		if n := len(nonEmptyLines(r.stdout)); n != len(s.members)+1 {
			t.Errorf("flux get kustomizations -l %s=web shows %d lines, want a header and %d Kustomizations:\n%s", v1alpha1.RolloutLabel, n, len(s.members), r.stdout)
		}
		tr.check(t)
	})
	if t.Failed() {
		return
	}

	t.Run("mcp", func(t *testing.T) {
		tr := newTranscript("mcp.md", "Transcript: an MCP client", transcriptIntro("an MCP client (the official Go SDK's) over stdio, to `tidegate mcp --allow-writes -n "+s.ns+"` as its subprocess", "wave rest"), norm)
		cmd := exec.CommandContext(ctx, tidegate, "mcp", "--allow-writes", "-n", s.ns)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}, env...)
		client := mcp.NewClient(&mcp.Implementation{Name: "transcript", Version: "v1"}, nil)
		session, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatalf("connecting to tidegate mcp: %v", err)
		}
		defer session.Close()
		call := func(wantError bool, tool string, args map[string]any) map[string]any {
			t.Helper()
			res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
			if err != nil {
				t.Fatalf("calling %s: %v", tool, err)
			}
			var out map[string]any
			b, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(b, &out); err != nil {
				t.Fatalf("%s: structured content %s: %v", tool, b, err)
			}
			if res.IsError != wantError {
				t.Fatalf("%s %v: isError %v, want %v: %s", tool, args, res.IsError, wantError, b)
			}
			tr.call(tool, args, out, res.IsError)
			return out
		}

		tr.section("Connecting", "The server says who it is and what an assistant should know; the tools it lists include the writes, as it was started with --allow-writes. `get_fleet_scope` is what it acts as: the kubeconfig's user, as the API server reports it.")
		init := session.InitializeResult()
		tools, err := session.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tl := range tools.Tools {
			names = append(names, tl.Name)
		}
		slices.Sort(names)
		tr.text(fmt.Sprintf("`initialize`: server `%s`, with instructions for the assistant:\n\n> %s\n\n`tools/list`: %s.", init.ServerInfo.Name, init.Instructions, "`"+strings.Join(names, "`, `")+"`"))
		if !strings.Contains(init.Instructions, "get_fleet_scope") {
			t.Errorf("initialize instructions %q do not say to call get_fleet_scope first", init.Instructions)
		}
		for _, w := range []string{"approve_fleet_rollout", "hold_fleet_rollout", "rollback_fleet_rollout", "get_fleet_job", "get_fleet_cluster_revision", "preview_fleet_change"} {
			if !slices.Contains(names, w) {
				t.Errorf("tools/list %v has no %s", names, w)
			}
		}
		scope := call(false, "get_fleet_scope", map[string]any{})
		if scope["writesAllowed"] != true || scope["transport"] != "stdio" || scope["namespace"] != s.ns {
			t.Errorf("scope %v, want writes allowed over stdio in %s", scope, s.ns)
		}

		tr.section("Discovering the candidate", "The rollouts, with the candidate and the known-good and their digests.")
		listed := call(false, "list_fleet_rollouts", map[string]any{})
		if !strings.Contains(indentJSON(listed), cand.Digest) || !strings.Contains(indentJSON(listed), kg.Digest) {
			t.Errorf("list_fleet_rollouts does not show the digests of the candidate %s and the known-good %s: %v", cand.Digest, kg.Digest, listed)
		}

		tr.section("An allowed change: approving the wave that waits", "The approval names the candidate's digest in full. The write returns a job handle; `get_fleet_job` follows it until the rollout settles: the last wave ran, the candidate is the known-good.")
		approved := call(false, "approve_fleet_rollout", map[string]any{"name": "web", "revision": cand.Digest, "wave": "rest", "by": "carol", "reason": "release review"})
		job := approved["job"]
		if job == nil || !strings.Contains(indentJSON(approved), cand.Digest) {
			t.Fatalf("approve returned no job for the candidate %s: %v", cand.Digest, approved)
		}
		s.expectApproved(t, rev2, "rest", "carol")
		// One call, waiting up to its five minutes: the last wave starts, soaks, and the rollout completes.
		settled := call(false, "get_fleet_job", map[string]any{"job": job, "waitSeconds": 300})
		if settled["state"] != "Settled" || settled["phase"] != v1alpha1.PhaseCompleted {
			t.Fatalf("get_fleet_job %v, want Settled in Completed", settled)
		}

		s.transcribeRefusalMCP(t, tr, call)
		tr.section("Desired and live revision of a cluster", "Wave rest's cluster, after the rollout completed.")
		revs := call(false, "get_fleet_cluster_revision", map[string]any{"cluster": member("rest")})
		if !strings.Contains(indentJSON(revs), `"agree": true`) || !strings.Contains(indentJSON(revs), cand.Digest) {
			t.Errorf("get_fleet_cluster_revision %s: want the candidate's digest, agreeing: %v", member("rest"), revs)
		}
		tr.section("A missing object", "Errors are structured: a code and the object they concern.")
		missing := call(true, "get_fleet_rollout", map[string]any{"name": "nope"})
		if e, _ := missing["error"].(map[string]any); e == nil || e["code"] != "NotFound" {
			t.Errorf("get_fleet_rollout nope: %v, want a NotFound error", missing)
		}
		tr.check(t)
	})
}

// expectExit runs bin with args (runIn) and fails the test when it does not exit with want.
func expectExit(ctx context.Context, t *testing.T, env []string, bin string) func(want int, args ...string) cmdResult {
	return func(want int, args ...string) cmdResult {
		t.Helper()
		r := runIn(ctx, t, env, bin, args...)
		if r.exit != want {
			t.Fatalf("%s %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), shellJoin(args), r.exit, want, r.stdout, r.stderr)
		}
		return r
	}
}

func transcriptIntro(path, wave string) string {
	return fmt.Sprintf(`One session of %s against the local fleet of the end-to-end tests: a hub and three member
API servers, real Flux source-controller and kustomize-controller, the rollout web in three
waves of one cluster each, every wave waiting for an approval. v1 runs everywhere (the
known-good); v2 is the candidate. This session approves %s, is refused a protected
install-time value, and asks a cluster for its revision. The transcripts of the three entry paths
are one test's, on the one candidate: [cli.md](cli.md), [flux-plugin.md](flux-plugin.md),
[mcp.md](mcp.md).

Commits, digests, hashes, UIDs, times, ages and ports are replaced by names in <angle brackets>;
a test fails when a transcript is stale (make transcripts writes them again).`, path, wave)
}

// waitApproval waits until rollout web's candidate is rev and it waits for an approval of wave.
func (s *fleetSetup) waitApproval(ctx context.Context, t *testing.T, wave, rev string) *v1alpha1.FleetRollout {
	t.Helper()
	var fr *v1alpha1.FleetRollout
	eventually(ctx, t, fmt.Sprintf("rollout web waiting for an approval of wave %s at %s", wave, rev), func() (bool, string) {
		fr = s.rollout(t, "web")
		w := fr.Status.WaitingFor
		return fr.Status.Candidate != nil && fr.Status.Candidate.Revision == rev && w != nil && w.Reason == v1alpha1.WaitingForApproval && w.Wave == wave, describe(fr)
	})
	return fr
}

// expectApproved checks that rollout web approves rev for wave by who, with the user the API
// server authenticated the writer as beside it.
func (s *fleetSetup) expectApproved(t *testing.T, rev, wave, who string) {
	t.Helper()
	fr := s.rollout(t, "web")
	for _, a := range fr.Spec.Approvals {
		if a.Revision == rev && a.Wave == wave && a.By == who && a.AuthenticatedAs != "" {
			return
		}
	}
	t.Errorf("rollout web has no approval of %s for wave %s by %s with the authenticated user: %+v", rev, wave, who, fr.Spec.Approvals)
}

// refusalSection starts the part of a session where the protected value is refused.
func (tr *transcript) refusalSection() {
	tr.section("A refused change: a protected install-time value", "The package's tidegate/install.cue fixes image at build time. Previewed against the candidate's exact digest, setting it is refused, with the reason, and nothing is written.")
}

// protectedImage is the install-time value the refused change sets.
const protectedImage = "image=ghcr.io/example/web:latest"

// transcribeRefusal previews the protected value from a command line (run returns its result,
// exit 1) and checks that the rollout's spec stayed at generation.
func (s *fleetSetup) transcribeRefusal(t *testing.T, tr *transcript, run func(args ...string) cmdResult, prog string) {
	t.Helper()
	generation := s.rollout(t, "web").Generation
	tr.refusalSection()
	args := []string{"preview", "values", "--rollout", "web", "-n", s.ns, "--digest", s.rollout(t, "web").Status.Candidate.Digest, protectedImage}
	r := run(args...)
	tr.command(prog+" "+shellJoin(args), r)
	expectContains(t, r.stdout, "image")
	s.expectGeneration(t, generation)
}

func (s *fleetSetup) transcribeRefusalMCP(t *testing.T, tr *transcript, call func(bool, string, map[string]any) map[string]any) {
	t.Helper()
	generation := s.rollout(t, "web").Generation
	tr.refusalSection()
	name, value, _ := strings.Cut(protectedImage, "=")
	res := call(false, "preview_fleet_change", map[string]any{"mode": "values", "rollout": "web", "digest": s.rollout(t, "web").Status.Candidate.Digest, "values": map[string]string{name: value}})
	if res["refused"] != true || !strings.Contains(indentJSON(res["protectedKeys"]), `"image"`) {
		t.Errorf("preview_fleet_change of %s: %v, want refused with image protected", protectedImage, res)
	}
	s.expectGeneration(t, generation)
}

func (s *fleetSetup) expectGeneration(t *testing.T, generation int64) {
	t.Helper()
	if fr := s.rollout(t, "web"); fr.Generation != generation {
		t.Errorf("rollout web is at generation %d, want %d: the refused change wrote something", fr.Generation, generation)
	}
}

// expectLine checks that a line of out starts with fields.
func expectLine(t *testing.T, out string, fields ...string) {
	t.Helper()
	if !hasLineWithFields(out, fields...) {
		t.Errorf("no line starts with %q:\n%s", fields, out)
	}
}

func expectContains(t *testing.T, out string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(out, p) {
			t.Errorf("%q is not in:\n%s", p, out)
		}
	}
}

// shellJoin is args as a shell command line: an argument with a space or a quote in it is quoted.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if strings.ContainsAny(a, " '\"") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
