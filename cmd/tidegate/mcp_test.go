package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
	"github.com/tidegate/tidegate/internal/scheme"
)

// mcpCommand is `tidegate mcp args...` as a subprocess: this test binary run as the command line,
// with the test kubeconfig, in writesNS.
func mcpCommand(ctx context.Context, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"mcp", "--kubeconfig", kubeconfig, "-n", writesNS}, args...)...)
	cmd.Env = append(append(os.Environ(), runAsCLI+"=1"), env...)
	return cmd
}

// mcpStdio connects the SDK's client to `tidegate mcp args...` over its stdio.
func mcpStdio(ctx context.Context, t *testing.T, args ...string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "tidegate-test", Version: "v0"}, nil)
	session, err := client.Connect(ctx, &mcp.CommandTransport{Command: mcpCommand(ctx, nil, args...)}, nil)
	if err != nil {
		t.Fatalf("connecting to tidegate mcp %v: %v", args, err)
	}
	t.Cleanup(func() { _ = session.Close() })
	return session
}

// mcpInMemory connects the SDK's client to s's server (its write tools too when allowWrites) over
// an in-memory transport.
func mcpInMemory(ctx context.Context, tb testing.TB, s *mcpServer, allowWrites bool) *mcp.ClientSession {
	tb.Helper()
	st, ct := mcp.NewInMemoryTransports()
	if _, err := s.server(allowWrites).Connect(ctx, st, nil); err != nil {
		tb.Fatal(err)
	}
	session, err := mcp.NewClient(&mcp.Implementation{Name: "tidegate-test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = session.Close() })
	return session
}

func toolNames(ctx context.Context, t testing.TB, s *mcp.ClientSession) []string {
	t.Helper()
	res, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

// call calls a tool and decodes its structured content into out; it returns whether the result is an error.
func call(ctx context.Context, t *testing.T, s *mcp.ClientSession, name string, args any, out any) bool {
	t.Helper()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: decoding %s: %v", name, b, err)
	}
	return res.IsError
}

type mcpErrorBody struct {
	Error ops.Error `json:"error"`
}

// An MCP client (the SDK's own) reads over stdio, is refused a write without --allow-writes (the
// tool does not exist) and, with it, when RBAC denies the identity it acts as (--as); gets
// structured errors for a missing object; and over HTTP with the bearer token approves a blocked
// wave and follows the job until the rollout settled.
func TestMCP(t *testing.T) {
	ctx := hub(t)
	fr := newRollout(ctx, t, "mcp-web", func(fr *v1alpha1.FleetRollout) {
		fr.Status.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForApproval, Wave: "everyone", Message: "wave everyone needs an approval"}
	})

	// Read-only by default: no tool that writes is listed, and calling one is refused.
	ro := mcpStdio(ctx, t)
	names := toolNames(ctx, t, ro)
	want := []string{"explain_fleet_gate", "get_fleet_cluster_revision", "get_fleet_job", "get_fleet_receipt", "get_fleet_rollout", "get_fleet_rollout_events", "get_fleet_rollout_ledger", "get_fleet_scope", "list_fleet_clusters", "list_fleet_receipts", "list_fleet_rollouts", "preview_fleet_change", "replay_fleet_policy", "verify_fleet_receipts"}
	if !slices.Equal(names, want) {
		t.Errorf("read-only tools %v, want %v", names, want)
	}
	if _, err := ro.CallTool(ctx, &mcp.CallToolParams{Name: "approve_fleet_rollout", Arguments: map[string]any{"name": fr.Name, "revision": webCandidate.Revision}}); err == nil {
		t.Errorf("approve without --allow-writes was not refused")
	}
	var status statusView
	if call(ctx, t, ro, "get_fleet_rollout", map[string]any{"name": fr.Name}, &status) || status.Name != fr.Name ||
		status.Candidate == nil || status.Candidate.Digest != webCandidate.Digest || status.LastKnownGood == nil || status.LastKnownGood.Digest != webKnownGood.Digest {
		t.Errorf("get_rollout: %+v, want %s with candidate %s and known-good %s", status, fr.Name, webCandidate.Digest, webKnownGood.Digest)
	}
	var listed items[rolloutRow]
	if call(ctx, t, ro, "list_fleet_rollouts", map[string]any{"selector": "tidegate.dev/none=x"}, &listed) || len(listed.Items) != 0 {
		t.Errorf("list_rollouts with a selector nothing matches: %+v", listed)
	}
	var badSelector mcpErrorBody
	if !call(ctx, t, ro, "list_fleet_rollouts", map[string]any{"selector": "a==b==c"}, &badSelector) || badSelector.Error.Code != ops.CodeInvalid {
		t.Errorf("list_rollouts with an invalid selector: %+v, want Invalid", badSelector)
	}
	var missing mcpErrorBody
	if !call(ctx, t, ro, "get_fleet_rollout", map[string]any{"name": "nope"}, &missing) ||
		missing.Error.Code != ops.CodeNotFound || missing.Error.Object == nil || *missing.Error.Object != ops.RolloutRef(writesNS, "nope") {
		t.Errorf("get_rollout of a missing rollout: %+v, want NotFound about fleetrollout %s/nope", missing, writesNS)
	}
	var scope scopeView
	if call(ctx, t, ro, "get_fleet_scope", map[string]any{}, &scope) || scope.User != "fleet-admin" || scope.Namespace != writesNS || scope.WritesAllowed || scope.Transport != "stdio" {
		t.Errorf("scope %+v, want fleet-admin in %s, read-only, over stdio", scope, writesNS)
	}

	// With writes allowed, acting as a user RBAC lets read and not write: the write is Forbidden.
	viewerRBAC(ctx, t, "mcp-viewer")
	as := mcpStdio(ctx, t, "--allow-writes", "--as", "mcp-viewer")
	if call(ctx, t, as, "get_fleet_scope", map[string]any{}, &scope) || scope.User != "mcp-viewer" || scope.Impersonate != "mcp-viewer" || !scope.WritesAllowed {
		t.Errorf("scope %+v, want mcp-viewer, impersonated, writes allowed", scope)
	}
	if call(ctx, t, as, "get_fleet_rollout", map[string]any{"name": fr.Name}, &status) {
		t.Errorf("mcp-viewer may read the rollout: %+v", status)
	}
	var denied mcpErrorBody
	if !call(ctx, t, as, "approve_fleet_rollout", map[string]any{"name": fr.Name, "revision": webCandidate.Revision, "wave": "everyone"}, &denied) ||
		denied.Error.Code != ops.CodeForbidden {
		t.Errorf("approve as mcp-viewer: %+v, want Forbidden", denied)
	}
	expectUnchanged(ctx, t, fr)

	// Over HTTP: a client without the token is turned away; with it, it approves and follows the job.
	const token = "0123456789abcdef0123456789abcdef"
	srvCtx, stopSrv := context.WithCancel(ctx)
	defer stopSrv()
	cmd := mcpCommand(srvCtx, []string{"TIDEGATE_MCP_TOKEN=" + token}, "--allow-writes", "--http", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stopSrv(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stderr).ReadString('\n')
	endpoint, ok := strings.CutPrefix(strings.TrimSpace(line), "tidegate mcp: serving ")
	if err != nil || !ok || !strings.HasPrefix(endpoint, "http://127.0.0.1:") {
		t.Fatalf("tidegate mcp --http printed %q (%v), want the endpoint on 127.0.0.1", line, err)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "tidegate-test", Version: "v0"}, nil)
	if s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1}, nil); err == nil {
		s.Close()
		t.Errorf("connected over HTTP without the bearer token")
	}
	hs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{token: token}}}, nil)
	if err != nil {
		t.Fatalf("connecting over HTTP with the token: %v", err)
	}
	defer hs.Close()
	var written writeResult
	if call(ctx, t, hs, "approve_fleet_rollout", map[string]any{"name": fr.Name, "revision": webCandidate.Revision[:len("main@sha1:")+12] + "x", "wave": "everyone"}, &written) {
		// An abbreviation that is not the candidate's is a warning, not a refusal: it was written.
		t.Fatalf("approve with a wrong abbreviation: %+v", written)
	}
	var approved writeResult
	short := strings.TrimPrefix(webCandidate.Revision, "main@sha1:")[:12]
	if call(ctx, t, hs, "approve_fleet_rollout", map[string]any{"name": fr.Name, "revision": short, "wave": "everyone", "by": "alice"}, &approved) ||
		!approved.Change.Changed || approved.Job.UID != fr.UID || approved.Job.Candidate == nil || approved.Job.Candidate.Digest != webCandidate.Digest {
		t.Fatalf("approve over HTTP: %+v", approved)
	}
	after := get(ctx, t, fr.Name)
	if !slices.ContainsFunc(after.Spec.Approvals, func(a v1alpha1.Approval) bool {
		given := a.ApprovedAt != nil
		a.ApprovedAt = nil
		return given && a == v1alpha1.Approval{Revision: webCandidate.Revision, Wave: "everyone", By: "alice", AuthenticatedAs: "fleet-admin"}
	}) {
		t.Errorf("approvals %+v, want the candidate approved for wave everyone by alice, written as fleet-admin, with the time it was given", after.Spec.Approvals)
	}
	var js ops.JobStatus
	if call(ctx, t, hs, "get_fleet_job", map[string]any{"job": approved.Job}, &js) || js.State != ops.JobPending {
		t.Errorf("job_status before the controller acted: %+v, want Pending", js)
	}
	pctx, stop := context.WithCancel(ctx)
	wg := playing(pctx, t, func(fr *v1alpha1.FleetRollout) bool {
		if fr.Name != "mcp-web" || fr.Generation <= fr.Status.ObservedGeneration {
			return false
		}
		fr.Status.ObservedGeneration, fr.Status.Phase, fr.Status.WaitingFor = fr.Generation, v1alpha1.PhaseCompleted, nil
		return true
	})
	defer func() { stop(); wg.Wait() }()
	if call(ctx, t, hs, "get_fleet_job", map[string]any{"job": approved.Job, "waitSeconds": 30}, &js) || js.State != ops.JobSettled || js.Phase != v1alpha1.PhaseCompleted {
		t.Errorf("job_status followed: %+v, want Settled in Completed", js)
	}
	var refused mcpErrorBody
	if !call(ctx, t, hs, "cancel_fleet_job", map[string]any{"job": approved.Job, "mode": "rollback"}, &refused) || refused.Error.Code != ops.CodeCannotCancel {
		t.Errorf("cancel by rollback of a completed rollout: %+v, want CannotCancel", refused)
	}
	// Over HTTP the server's own files are not read for a client.
	var noDir mcpErrorBody
	if !call(ctx, t, hs, "replay_fleet_policy", map[string]any{"rollout": fr.Name, "policyDir": "/etc"}, &noDir) || noDir.Error.Code != ops.CodeInvalid ||
		!strings.Contains(noDir.Error.Message, "stdio only") {
		t.Errorf("replay_policy with policyDir over HTTP: %+v, want Invalid (stdio only)", noDir)
	}
}

// bearer sends a bearer token with every request, through base (http.DefaultTransport when nil).
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	if b.base == nil {
		return http.DefaultTransport.RoundTrip(r)
	}
	return b.base.RoundTrip(r)
}

// viewerRBAC lets user read tidegate's objects in writesNS, and nothing more.
func viewerRBAC(ctx context.Context, t *testing.T, user string) {
	t.Helper()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: writesNS},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"fleetrollouts", "fleetclusters", "gatereceipts"}, Verbs: []string{"get", "list", "watch"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: writesNS},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	if err := k8s.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), binding); _ = k8s.Delete(context.Background(), role) })
	waitAuthorized(ctx, t, user, nil, authorizationv1.ResourceAttributes{Namespace: writesNS, Verb: "get", Group: v1alpha1.GroupVersion.Group, Resource: "fleetrollouts"}, true)
}

// A tool's error from the command line's own usage error (an exitError around a message, such as
// verify_receipts of a rollout without receipts) is Invalid with that message, never an empty
// error (FuzzMCPToolCall found {"error": null}).
func TestMCPErrorOfAUsageError(t *testing.T) {
	err := mcpError(usageError("no gatereceipts of fleetrollout %s found in namespace %s", "web", "fleet"), ops.Ref{Kind: "gatereceipts", Namespace: "fleet"})
	if err == nil || err.Code != ops.CodeInvalid || err.Message != "no gatereceipts of fleetrollout web found in namespace fleet" {
		t.Fatalf("mcpError of a usage error: %+v, want Invalid with its message", err)
	}
	if err := mcpError(&exitError{code: exitUsage, err: fmt.Errorf("reading: %w", ops.Errorf(ops.CodeNotFound, nil, "gone"))}, ops.Ref{}); err == nil || err.Code != ops.CodeNotFound {
		t.Fatalf("mcpError of a wrapped ops error: %+v, want NotFound", err)
	}
}

// Every tool is named verb_fleet_noun, so that its names stay apart from those of another server an
// assistant runs beside it (Flux's get_kubernetes_resources, reconcile_flux_kustomization, ...).
func TestMCPToolNamesReadBesideFlux(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &mcpServer{k: &kubeOptions{env: &cliEnv{now: func() time.Time { return fixedNow }}}, c: fake.NewClientBuilder().WithScheme(scheme.New()).Build(), ns: "fleet"}
	names := toolNames(ctx, t, mcpInMemory(ctx, t, s, true))
	pattern := regexp.MustCompile(`^[a-z]+_fleet(_[a-z]+)+$`)
	for _, n := range names {
		if !pattern.MatchString(n) {
			t.Errorf("tool %s is not named verb_fleet_noun", n)
		}
	}
	if len(names) != len(mcpToolInputs) {
		t.Errorf("tools %v, want the %d of mcpToolInputs", names, len(mcpToolInputs))
	}
}

// The initialize result's instructions say what tidegate is and which tools to call first; every
// tool they name is one the server lists, and a read-only server says it serves no writes.
func TestMCPInstructions(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &mcpServer{k: &kubeOptions{env: &cliEnv{now: func() time.Time { return fixedNow }}}, c: fake.NewClientBuilder().WithScheme(scheme.New()).Build(), ns: "fleet"}
	for _, writes := range []bool{false, true} {
		session := mcpInMemory(ctx, t, s, writes)
		text := session.InitializeResult().Instructions
		names := toolNames(ctx, t, session)
		named := regexp.MustCompile(`\b[a-z]+_fleet(_[a-z]+)+\b`).FindAllString(text, -1)
		if !strings.Contains(text, "get_fleet_scope") || !strings.Contains(text, "FleetRollout") {
			t.Errorf("writes %v: instructions %q do not say what tidegate is and to call get_fleet_scope first", writes, text)
		}
		for _, n := range named {
			if !slices.Contains(names, n) {
				t.Errorf("writes %v: the instructions name %s, which the server does not list", writes, n)
			}
		}
		if writes != strings.Contains(text, "Git commit") || writes == strings.Contains(text, "read-only") {
			t.Errorf("writes %v: instructions %q", writes, text)
		}
	}
}
