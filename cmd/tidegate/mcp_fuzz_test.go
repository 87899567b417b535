package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/scheme"
)

// mcpToolInputs are the tools `tidegate mcp --allow-writes` serves, each with a new value of the
// type its arguments decode into, and whether it writes.
var mcpToolInputs = map[string]struct {
	input func() any
	write bool
}{
	"get_fleet_scope":            {func() any { return &struct{}{} }, false},
	"list_fleet_rollouts":        {func() any { return &listInput{} }, false},
	"list_fleet_clusters":        {func() any { return &listInput{} }, false},
	"get_fleet_rollout":          {func() any { return &rolloutInput{} }, false},
	"list_fleet_receipts":        {func() any { return &receiptsInput{} }, false},
	"get_fleet_receipt":          {func() any { return &receiptInput{} }, false},
	"verify_fleet_receipts":      {func() any { return &verifyInput{} }, false},
	"get_fleet_rollout_events":   {func() any { return &rolloutInput{} }, false},
	"get_fleet_rollout_ledger":   {func() any { return &ledgerInput{} }, false},
	"get_fleet_job":              {func() any { return &jobInput{} }, false},
	"replay_fleet_policy":        {func() any { return &replayPolicyInput{} }, false},
	"get_fleet_cluster_revision": {func() any { return &clusterRevisionInput{} }, false},
	"explain_fleet_gate":         {func() any { return &explainInput{} }, false},
	"preview_fleet_change":       {func() any { return &previewInput{} }, false},
	"hold_fleet_rollout":         {func() any { return &holdInput{} }, true},
	"resume_fleet_rollout":       {func() any { return &rolloutInput{} }, true},
	"approve_fleet_rollout":      {func() any { return &approveInput{} }, true},
	"rollback_fleet_rollout":     {func() any { return &rolloutInput{} }, true},
	"retry_fleet_rollout":        {func() any { return &rolloutInput{} }, true},
	"reconcile_fleet_rollout":    {func() any { return &rolloutInput{} }, true},
	"cancel_fleet_job":           {func() any { return &cancelInput{} }, true},
}

// writeRecorder refuses every write of a client and records what it was about.
type writeRecorder struct {
	mu     sync.Mutex
	writes []client.ObjectKey
}

func (w *writeRecorder) refuse(obj client.Object) error {
	if _, ok := obj.(*authenticationv1.SelfSubjectReview); ok {
		// A question to the API server (who am I), which stores nothing.
		return apierrors.NewNotFound(schema.GroupResource{Group: "authentication.k8s.io", Resource: "selfsubjectreviews"}, "")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, client.ObjectKeyFromObject(obj))
	return apierrors.NewForbidden(schema.GroupResource{Resource: "any"}, obj.GetName(), errors.New("a fuzz input's write"))
}

func (w *writeRecorder) take() []client.ObjectKey {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.writes
	w.writes = nil
	return out
}

func (w *writeRecorder) funcs() interceptor.Funcs {
	return interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			return w.refuse(obj)
		},
		Update: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.UpdateOption) error {
			return w.refuse(obj)
		},
		Patch: func(_ context.Context, _ client.WithWatch, obj client.Object, _ client.Patch, _ ...client.PatchOption) error {
			return w.refuse(obj)
		},
		Delete: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.DeleteOption) error {
			return w.refuse(obj)
		},
		DeleteAllOf: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.DeleteAllOfOption) error {
			return w.refuse(obj)
		},
		SubResourceCreate: func(_ context.Context, _ client.Client, _ string, obj, _ client.Object, _ ...client.SubResourceCreateOption) error {
			return w.refuse(obj)
		},
		SubResourceUpdate: func(_ context.Context, _ client.Client, _ string, obj client.Object, _ ...client.SubResourceUpdateOption) error {
			return w.refuse(obj)
		},
		SubResourcePatch: func(_ context.Context, _ client.Client, _ string, obj client.Object, _ client.Patch, _ ...client.SubResourcePatchOption) error {
			return w.refuse(obj)
		},
	}
}

// named is the rollout a write tool's decoded input names, in the server's namespace when it
// names none.
func named(in any) client.ObjectKey {
	var ns, name string
	switch in := in.(type) {
	case *rolloutInput:
		ns, name = in.Namespace, in.Name
	case *holdInput:
		ns, name = in.Namespace, in.Name
	case *approveInput:
		ns, name = in.Namespace, in.Name
	case *cancelInput:
		return client.ObjectKey{Namespace: in.Job.Rollout.Namespace, Name: in.Job.Rollout.Name}
	}
	if ns == "" {
		ns = "fleet"
	}
	return client.ObjectKey{Namespace: ns, Name: name}
}

// FuzzMCPToolCall calls a tool of `tidegate mcp --allow-writes` with arguments of the fuzzer's,
// through the MCP SDK as a client's call reaches it (the SDK checks the arguments against the
// tool's input schema and decodes them; tidegate has no decoding of its own), over a hub holding
// one suspended rollout, fleet/web, whose every write the client refuses and records. A call
// never panics and returns within its deadline; arguments that are not a JSON object, or that do
// not decode into the tool's input (a wrong type, an unknown field), get an error and no write;
// a read tool never writes, and a write tool writes only to the rollout its arguments name; a
// tidegate error has a code. Among the seeds: a 1 MiB name, JSON nested 5,000 deep, 10,000
// receipt names, 10,000 values.
func FuzzMCPToolCall(f *testing.F) {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet", Name: "web", UID: "u-web", Generation: 1},
		Spec: v1alpha1.FleetRolloutSpec{Suspend: true}}
	fr.Status.Phase = v1alpha1.PhaseCompleted
	writes := &writeRecorder{}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(fr).WithStatusSubresource(fr).
		WithInterceptorFuncs(writes.funcs()).Build()
	s := &mcpServer{k: &kubeOptions{env: &cliEnv{now: func() time.Time { return fixedNow }, pollInterval: time.Millisecond}}, c: c, ns: "fleet",
		// Over HTTP: policyDir, which reads the server's files, is refused.
		scope: scopeView{Namespace: "fleet", WritesAllowed: true, Transport: "http"}}
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	session := mcpInMemory(ctx, f, s, true)
	listed, err := session.ListTools(ctx, nil)
	if err != nil {
		f.Fatal(err)
	}
	var tools []string
	for _, tl := range listed.Tools {
		if _, ok := mcpToolInputs[tl.Name]; !ok {
			f.Fatalf("tool %s is not in mcpToolInputs: add it with its input type", tl.Name)
		}
		tools = append(tools, tl.Name)
	}
	if len(tools) != len(mcpToolInputs) {
		f.Fatalf("the server lists %d tools, mcpToolInputs %d", len(tools), len(mcpToolInputs))
	}

	// The write tools reach the client: a hold of fleet/web is one write, to it.
	if _, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "hold_fleet_rollout", Arguments: map[string]any{"name": "web", "reason": "r"}}); err != nil {
		f.Fatal(err)
	}
	if w := writes.take(); len(w) != 1 || w[0] != (client.ObjectKey{Namespace: "fleet", Name: "web"}) {
		f.Fatalf("a hold of fleet/web wrote %v", w)
	}

	seeds := []struct{ tool, args string }{
		{"get_fleet_scope", `{}`}, {"get_fleet_scope", `{"x":1}`}, {"get_fleet_scope", `null`}, {"get_fleet_scope", `[]`},
		{"list_fleet_rollouts", `{"selector":"a==b==c"}`}, {"list_fleet_rollouts", `{"allNamespaces":true,"selector":"app in (a,b)"}`},
		{"get_fleet_rollout", `{"name":"web"}`}, {"get_fleet_rollout", `{"name":7}`}, {"get_fleet_rollout", `{}`},
		{"get_fleet_receipt", `{"name":"web-deploysafe-0123456789ab","namespace":"fleet"}`},
		{"verify_fleet_receipts", `{"names":["a"],"rollout":"web"}`}, {"verify_fleet_receipts", `{"rollout":"web"}`},
		{"verify_fleet_receipts", `{"rollout":"web","keys":["-----BEGIN PUBLIC KEY-----\nMA==\n-----END PUBLIC KEY-----\n"]}`},
		{"verify_fleet_receipts", `{"names":["a"],"revision":"main@sha1:abc"}`},
		{"get_fleet_rollout_events", `{"name":"web"}`}, {"get_fleet_rollout_ledger", `{"name":"web","revision":"main@sha1:abc"}`},
		{"get_fleet_job", `{"job":{"rollout":{"namespace":"fleet","name":"web"},"uid":"u-web","generation":1},"waitSeconds":300}`},
		{"get_fleet_job", `{"job":{"rollout":{"namespace":"fleet","name":"gone"}},"waitSeconds":-1}`},
		{"replay_fleet_policy", `{"rollout":"web","policyFiles":{"policy.cue":"deploySafe: _"}}`},
		{"replay_fleet_policy", `{"rollout":"web","policyDir":"/etc"}`}, {"replay_fleet_policy", `{"rollout":"web","policyFiles":{"../x.cue":""}}`},
		{"get_fleet_cluster_revision", `{"cluster":"eu-1"}`}, {"explain_fleet_gate", `{"rollout":"web","gate":"deploySafe"}`},
		{"preview_fleet_change", `{"mode":"values","rollout":"web","values":{"replicas":"3"}}`}, {"preview_fleet_change", `{"mode":"policy","receipt":"r","policy":{"p.cue":"x: 1"}}`},
		{"preview_fleet_change", `{"mode":"other"}`},
		{"hold_fleet_rollout", `{"name":"web","reason":"incident 7"}`}, {"hold_fleet_rollout", `{"name":"web"}`}, {"hold_fleet_rollout", `{"name":"web","reason":1}`},
		{"resume_fleet_rollout", `{"name":"web"}`}, {"resume_fleet_rollout", `{"name":"web","namespace":"other"}`}, {"resume_fleet_rollout", `{"name":"web","extra":true}`},
		{"approve_fleet_rollout", `{"name":"web","revision":"main@sha1:abc","wave":"canary","by":"ops"}`}, {"approve_fleet_rollout", `{"name":"web","revision":["x"]}`},
		{"rollback_fleet_rollout", `{"name":"web"}`}, {"retry_fleet_rollout", `{"name":"nope"}`}, {"reconcile_fleet_rollout", `{"name":""}`},
		{"cancel_fleet_job", `{"job":{"rollout":{"namespace":"fleet","name":"web"},"uid":"u-web"},"mode":"hold","reason":"r"}`},
		{"cancel_fleet_job", `{"job":{"rollout":{"namespace":"fleet","name":"web"}},"mode":"undo"}`},
		// Exhaustion: a 1 MiB name, JSON nested 5,000 deep, 10,000 names and 10,000 values.
		{"get_fleet_rollout", `{"name":"` + strings.Repeat("w", 1<<20) + `"}`},
		{"hold_fleet_rollout", `{"name":"web","reason":"` + strings.Repeat("r", 1<<20) + `"}`},
		{"approve_fleet_rollout", `{"name":"web","revision":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`},
		{"preview_fleet_change", `{"mode":"values","values":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat("}", 5000) + `}`},
		{"verify_fleet_receipts", `{"names":["` + strings.Repeat(`r","`, 10000) + `r"]}`},
		{"preview_fleet_change", `{"mode":"values","rollout":"web","values":{"` + strings.Repeat(`k":"v","k`, 10000) + `":"v"}}`},
	}
	for _, sd := range seeds {
		for i, name := range tools {
			if name == sd.tool {
				f.Add(uint8(i), []byte(sd.args))
			}
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, args []byte) {
		name := tools[int(which)%len(tools)]
		if !json.Valid(args) {
			return // a client cannot send it: the call's JSON would not be JSON
		}
		kind := mcpToolInputs[name]
		in := kind.input()
		dec := json.NewDecoder(bytes.NewReader(args))
		dec.DisallowUnknownFields()
		trimmed := bytes.TrimSpace(args)
		valid := (trimmed[0] == '{' && dec.Decode(in) == nil) || bytes.Equal(trimmed, []byte("null"))

		callCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		res, err := session.CallTool(callCtx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
		if callCtx.Err() != nil {
			t.Fatalf("%s(%.200s) did not return within 20 s", name, args)
		}
		written := writes.take()
		failed := err != nil || res.IsError
		if !valid && (!failed || len(written) > 0) {
			t.Fatalf("%s with arguments that do not decode into its input (%.200s): error %v, result error %v, writes %v", name, args, err, res != nil && res.IsError, written)
		}
		if len(written) > 0 {
			if !kind.write {
				t.Fatalf("read tool %s wrote %v (arguments %.200s)", name, written, args)
			}
			for _, w := range written {
				if w != named(in) {
					t.Fatalf("%s(%.200s) wrote %v, its arguments name %v", name, args, w, named(in))
				}
			}
		}
		if err == nil && res.IsError && res.StructuredContent != nil {
			var body mcpErrorBody
			raw, _ := json.Marshal(res.StructuredContent)
			if json.Unmarshal(raw, &body) != nil || body.Error.Code == "" {
				t.Fatalf("%s(%.200s): an error without a code: %s", name, args, raw)
			}
		}
	})
}
