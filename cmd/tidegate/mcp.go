package main

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
)

// mcpServer is tidegate's MCP front end: each tool calls what the matching CLI command calls,
// with the hub client of the kubeconfig it was started with, so Kubernetes RBAC decides what it
// may do; tools that change anything exist only with --allow-writes.
type mcpServer struct {
	k     *kubeOptions
	c     client.Client
	ns    string
	scope scopeView
}

// scopeView is the authentication scope the server acts in: the tool result "scope".
type scopeView struct {
	Server        string   `json:"server"`
	Context       string   `json:"context,omitempty"`
	Namespace     string   `json:"namespace"`
	Impersonate   string   `json:"impersonate,omitempty"`
	ImpersonateAs []string `json:"impersonateGroups,omitempty"`
	// User and Groups are who the API server says the kubeconfig authenticates as (a
	// SelfSubjectReview); IdentityError says why that could not be asked.
	User          string   `json:"user,omitempty"`
	Groups        []string `json:"groups,omitempty"`
	IdentityError string   `json:"identityError,omitempty"`
	WritesAllowed bool     `json:"writesAllowed"`
	Transport     string   `json:"transport"`
}

func newMCPCommand(k *kubeOptions) *cobra.Command {
	var (
		allowWrites bool
		httpAddr    string
		tokenFile   string
		tlsCertFile string
		tlsKeyFile  string
	)
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve tidegate to AI assistants and automation over the Model Context Protocol",
		Long: `mcp serves tidegate's reads and, with --allow-writes, its writes as MCP tools, over stdio (the
default: an assistant starts it as a subprocess) or over streamable HTTP (--http ADDR).

Every tool is named verb_fleet_noun (get_fleet_rollout, hold_fleet_rollout, ...), so that its
names stay apart from those of other servers an assistant runs beside it, Flux's among them.

It acts with the kubeconfig it is given (--kubeconfig, --context, -n, --as and --as-group), so
Kubernetes RBAC decides what it may read and change; the tool get_fleet_scope says who that is.
It is read-only by default: the tools that write (hold_fleet_rollout, resume_fleet_rollout,
approve_fleet_rollout, rollback_fleet_rollout, retry_fleet_rollout, reconcile_fleet_rollout and
cancel_fleet_job) exist only with --allow-writes. Every write returns a job handle that
get_fleet_job follows until the rollout settles. Results and errors are JSON; an error has a
stable code (NotFound, Forbidden, Invalid, Refused, Conflict, APINotServed, Unavailable, Timeout,
CannotCancel, Unmet, Internal) and the object it concerns.

Over HTTP it requires a bearer token, read from --token-file or $TIDEGATE_MCP_TOKEN, and the
endpoint is http://ADDR/mcp. Plain HTTP is served on a loopback address only (127.0.0.1, [::1],
localhost): any other address is refused unless --tls-cert-file and --tls-key-file are given, and
it is then https://ADDR/mcp. Requests are bounded in time (headers 10s, the whole request 30s, a
response 6m, the longest get_fleet_job wait and a minute; an idle connection is closed after 2m),
and a session no request came for in 30m is closed: its client starts a new one.`,
		Example: `  tidegate mcp
  tidegate mcp --allow-writes --as alice
  TIDEGATE_MCP_TOKEN=$(openssl rand -hex 32) tidegate mcp --http 127.0.0.1:8765
  tidegate mcp --http :8443 --token-file token --tls-cert-file tls.crt --tls-key-file tls.key`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The HTTP transport's token and listener are checked before the hub is asked anything.
			var h *mcpHTTP
			if httpAddr != "" {
				var err error
				if h, err = listenMCP(httpAddr, tokenFile, tlsCertFile, tlsKeyFile); err != nil {
					return err
				}
				defer h.ln.Close()
			} else if tlsCertFile != "" || tlsKeyFile != "" {
				return usageError("--tls-cert-file and --tls-key-file serve --http over TLS: give --http ADDR too")
			}
			c, ns, err := k.client()
			if err != nil {
				return err
			}
			s := &mcpServer{k: k, c: c, ns: ns}
			s.scope = s.readScope(cmd.Context(), allowWrites, h != nil)
			server := s.server(allowWrites)
			if h == nil {
				return server.Run(cmd.Context(), &mcp.StdioTransport{})
			}
			return h.serve(cmd.Context(), server, cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&allowWrites, "allow-writes", false, "serve the tools that change rollouts (hold_, resume_, approve_, rollback_, retry_ and reconcile_fleet_rollout, cancel_fleet_job)")
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve streamable HTTP on this address (e.g. 127.0.0.1:8765) instead of stdio")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "file holding the bearer token HTTP clients must send (else $TIDEGATE_MCP_TOKEN)")
	cmd.Flags().StringVar(&tlsCertFile, "tls-cert-file", "", "with --http: serve HTTPS with this PEM certificate (chain); required for an address that is not loopback")
	cmd.Flags().StringVar(&tlsKeyFile, "tls-key-file", "", "with --http: the PEM private key of --tls-cert-file")
	return cmd
}

// readScope says who the server acts as: the kubeconfig's server, context and namespace, the
// impersonation asked for, and the identity the API server reports for all that.
func (s *mcpServer) readScope(ctx context.Context, allowWrites, overHTTP bool) scopeView {
	v := scopeView{Namespace: s.ns, WritesAllowed: allowWrites, Transport: "stdio"}
	if overHTTP {
		v.Transport = "http"
	}
	if cfg, err := s.k.flags.ToRESTConfig(); err == nil {
		v.Server = cfg.Host
		v.Impersonate, v.ImpersonateAs = cfg.Impersonate.UserName, cfg.Impersonate.Groups
	}
	if raw, err := s.k.flags.ToRawKubeConfigLoader().RawConfig(); err == nil {
		v.Context = raw.CurrentContext
		if c := s.k.flags.Context; c != nil && *c != "" {
			v.Context = *c
		}
	}
	if id, err := ops.WhoAmI(ctx, s.c); err != nil {
		v.IdentityError = err.Error()
	} else {
		v.User, v.Groups = id.User, id.Groups
	}
	return v
}

// Tool inputs.
type (
	listInput struct {
		Namespace     string `json:"namespace,omitempty" jsonschema:"namespace to list in; the server's namespace when empty"`
		AllNamespaces bool   `json:"allNamespaces,omitempty" jsonschema:"list in every namespace"`
		Selector      string `json:"selector,omitempty" jsonschema:"a label selector as kubectl -l takes it"`
	}
	rolloutInput struct {
		Name      string `json:"name" jsonschema:"the FleetRollout's name"`
		Namespace string `json:"namespace,omitempty" jsonschema:"its namespace; the server's namespace when empty"`
	}
	receiptsInput struct {
		Rollout   string `json:"rollout,omitempty" jsonschema:"only the receipts of this FleetRollout"`
		Namespace string `json:"namespace,omitempty" jsonschema:"namespace; the server's namespace when empty"`
	}
	receiptInput struct {
		Name      string `json:"name" jsonschema:"the GateReceipt's name"`
		Namespace string `json:"namespace,omitempty" jsonschema:"its namespace; the server's namespace when empty"`
	}
	jobInput struct {
		Job         ops.Job `json:"job" jsonschema:"the job handle a write returned"`
		WaitSeconds int     `json:"waitSeconds,omitempty" jsonschema:"wait up to this many seconds (at most 300) for the job to settle or pause for an approval"`
	}
	holdInput struct {
		rolloutInput
		Reason string `json:"reason" jsonschema:"why the rollout is held (required)"`
	}
	approveInput struct {
		rolloutInput
		Revision     string `json:"revision" jsonschema:"the revision to approve, as status.candidate.revision shows it, or 7 or more characters of its commit or digest"`
		Wave         string `json:"wave,omitempty" jsonschema:"the wave to approve; every wave of the revision when empty"`
		Irreversible bool   `json:"irreversible,omitempty" jsonschema:"approve the changes the rollbackSafe gate flagged as irreversible"`
		By           string `json:"by,omitempty" jsonschema:"who approves"`
		Reason       string `json:"reason,omitempty" jsonschema:"why"`
	}
	cancelInput struct {
		Job    ops.Job `json:"job" jsonschema:"the job handle to cancel"`
		Mode   string  `json:"mode" jsonschema:"hold (always possible: nothing is undone) or rollback (to the known-good revision)"`
		Reason string  `json:"reason,omitempty" jsonschema:"the hold's reason"`
	}
)

// replayPolicyInput is the input of replay_fleet_policy.
type replayPolicyInput struct {
	Rollout     string            `json:"rollout" jsonschema:"the FleetRollout whose receipts to replay"`
	Namespace   string            `json:"namespace,omitempty" jsonschema:"its namespace; the server's namespace when empty"`
	PolicyDir   string            `json:"policyDir,omitempty" jsonschema:"a directory of .cue files on the server's machine holding the proposed policy (over stdio only)"`
	PolicyFiles map[string]string `json:"policyFiles,omitempty" jsonschema:"the proposed policy's files instead: file name (policy.cue) to CUE text"`
}

func (s *mcpServer) namespace(ns string) string {
	if ns == "" {
		return s.ns
	}
	return ns
}

// mcpInstructions is what the server tells an assistant in its initialize result: what tidegate
// is, which tools to call first, and that a write is a change of the rollout's spec, as a commit
// would make it, which Kubernetes RBAC allows or refuses.
func mcpInstructions(allowWrites bool) string {
	writes := "This server is read-only: it was started without --allow-writes, so it serves no tool that writes."
	if allowWrites {
		writes = "Writes (hold_fleet_rollout, resume_fleet_rollout, approve_fleet_rollout, rollback_fleet_rollout, retry_fleet_rollout, " +
			"reconcile_fleet_rollout, cancel_fleet_job) patch the FleetRollout's spec or its reconcile annotation, never its status: " +
			"the same change a Git commit of the spec would make, and where the FleetRollout is applied from Git, a field the manifest also sets is set back by Flux's next apply. " +
			"Each write returns a job; get_fleet_job follows it until the rollout settles. Act only when the user asked for the change."
	}
	return "tidegate rolls a package out to a fleet of Kubernetes clusters wave by wave, on top of Flux: a FleetRollout moves its candidate revision " +
		"from wave to wave only when four policy gates pass (deploySafe, noDisruption, rollbackSafe, rollbackSucceeds); each decision is kept " +
		"as a GateReceipt and chained in a RolloutLedger. Start with get_fleet_scope (who this server acts as; Kubernetes RBAC decides what each call may do), " +
		"then list_fleet_rollouts and get_fleet_rollout (waves, gates, what the rollout waits for). explain_fleet_gate says why a gate decided as it did " +
		"and what would let it pass; get_fleet_rollout_events and get_fleet_rollout_ledger say what happened. " + writes
}

// server builds the MCP server: the read tools, and the write tools when allowWrites.
func (s *mcpServer) server(allowWrites bool) *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "tidegate", Version: version()}, &mcp.ServerOptions{Instructions: mcpInstructions(allowWrites)})
	tool(server, "get_fleet_scope", "Who this server acts as: the API server, kubeconfig context, namespace, impersonation, the identity the API server reports, and whether writes are allowed.",
		true, func(ctx context.Context, _ struct{}) (any, error) { return s.scope, nil })
	tool(server, "list_fleet_rollouts", "List FleetRollouts: phase, current wave, candidate and known-good (revisions and digests), Ready.",
		true, func(ctx context.Context, in listInput) (any, error) {
			opts, err := s.listScope(in)
			if err != nil {
				return nil, err
			}
			var list v1alpha1.FleetRolloutList
			if err := s.c.List(ctx, &list, opts...); err != nil {
				return nil, ops.AsError(err, ops.Ref{Kind: "fleetrollouts", Namespace: s.listNamespace(in)})
			}
			return items[rolloutRow]{Items: rolloutRows(list.Items)}, nil
		})
	tool(server, "list_fleet_clusters", "List FleetClusters: member API server version, Ready, when last seen.",
		true, func(ctx context.Context, in listInput) (any, error) {
			opts, err := s.listScope(in)
			if err != nil {
				return nil, err
			}
			var list v1alpha1.FleetClusterList
			if err := s.c.List(ctx, &list, opts...); err != nil {
				return nil, ops.AsError(err, ops.Ref{Kind: "fleetclusters", Namespace: s.listNamespace(in)})
			}
			return items[clusterRow]{Items: clusterRows(list.Items)}, nil
		})
	tool(server, "get_fleet_rollout", "A FleetRollout's status as tidegate status shows it: waves, gates and their receipts, what it waits for, the candidate and known-good with digests, rollback, lagging and skipped clusters.",
		true, func(ctx context.Context, in rolloutInput) (any, error) {
			ns := s.namespace(in.Namespace)
			fr := &v1alpha1.FleetRollout{}
			if err := s.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: in.Name}, fr); err != nil {
				return nil, ops.AsError(err, ops.RolloutRef(ns, in.Name))
			}
			return toStatusView(fr), nil
		})
	tool(server, "list_fleet_receipts", "List GateReceipts (of one rollout with rollout), oldest decision first: gate, wave, result, candidate, targets, policy digest, reasons.",
		true, func(ctx context.Context, in receiptsInput) (any, error) {
			ns := s.namespace(in.Namespace)
			var list v1alpha1.GateReceiptList
			if err := s.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
				return nil, ops.AsError(err, ops.Ref{Kind: "gatereceipts", Namespace: ns})
			}
			return items[receiptRow]{Items: receiptRows(list.Items, in.Rollout)}, nil
		})
	tool(server, "get_fleet_receipt", "One GateReceipt as recorded: the decision, its inputs (candidate, known-good, policy digest, approvals, evidence digest) and its reasons.",
		true, func(ctx context.Context, in receiptInput) (any, error) {
			ns := s.namespace(in.Namespace)
			rc := &v1alpha1.GateReceipt{}
			if err := s.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: in.Name}, rc); err != nil {
				return nil, ops.AsError(err, ops.Ref{Kind: "gatereceipt", Namespace: ns, Name: in.Name})
			}
			rc.ManagedFields = nil
			return rc, nil
		})
	tool(server, "get_fleet_job", "Where a write's job stands: Pending (not yet acted on), Running, AwaitingApproval, Settled or Gone, with the rollout's phase, Ready and what it waits for; waitSeconds waits for it to settle.",
		true, func(ctx context.Context, in jobInput) (any, error) {
			if in.WaitSeconds <= 0 {
				return ops.Status(ctx, s.c, in.Job)
			}
			ctx, cancel := context.WithTimeout(ctx, time.Duration(min(in.WaitSeconds, int(mcpMaxWait/time.Second)))*time.Second)
			defer cancel()
			return ops.Follow(ctx, s.c, in.Job, s.k.env.pollInterval, nil)
		})
	tool(server, "replay_fleet_policy", "Decide a rollout's recorded gate decisions again with a proposed policy (as tidegate policy replay): every decision whose result would change, with the old and new reasons, and receipts whose evidence cannot be read. Give the policy as policyDir or as policyFiles (file name to CUE text). Writes nothing.",
		true, func(ctx context.Context, in replayPolicyInput) (any, error) {
			if in.PolicyDir != "" && s.scope.Transport != "stdio" {
				// Over HTTP the client is not on the server's machine: its files are not the client's
				// to read, and a CUE error would quote them.
				return nil, ops.Errorf(ops.CodeInvalid, nil, "policyDir reads the server's own files and is served over stdio only: give the policy as policyFiles")
			}
			p, err := ops.ProposedPolicy(in.PolicyDir, in.PolicyFiles)
			if err != nil {
				return nil, err
			}
			return ops.ReplayPolicy(ctx, s.c, s.namespace(in.Namespace), in.Rollout, p)
		})
	s.recordTools(server)
	s.inspectTools(server)
	if !allowWrites {
		return server
	}
	// write adds a tool that applies the mutation m builds, when called, to the rollout named.
	write := func(name, desc string, m func() ops.Mutation) {
		tool(server, name, desc, false, func(ctx context.Context, in rolloutInput) (any, error) { return s.apply(ctx, in, m()) })
	}
	tool(server, "hold_fleet_rollout", "Hold a rollout where it is (spec.hold): no new wave starts; what is applied stays applied.",
		false, func(ctx context.Context, in holdInput) (any, error) {
			return s.apply(ctx, in.rolloutInput, ops.Hold(in.Reason))
		})
	write("resume_fleet_rollout", "Resume a held or suspended rollout (clears spec.hold and spec.suspend).", func() ops.Mutation { return ops.Resume() })
	tool(server, "approve_fleet_rollout", "Approve a revision for a wave, or its irreversible changes (appends to spec.approvals).",
		false, func(ctx context.Context, in approveInput) (any, error) {
			a := v1alpha1.Approval{Revision: in.Revision, Wave: in.Wave, Irreversible: in.Irreversible, By: in.By, Reason: in.Reason}
			return s.apply(ctx, in.rolloutInput, ops.ApproveAs(ctx, s.c, a))
		})
	write("rollback_fleet_rollout", "Roll back (spec.rollback.request): while Progressing or Held, every cluster goes back to the known-good at once; once Completed, the previous known-good of status.history is rolled out again through the gates, wave by wave.",
		func() ops.Mutation { return ops.Rollback(s.k.env.now()) })
	write("retry_fleet_rollout", "Let a rejected or failed candidate go again (spec.retry).", func() ops.Mutation { return ops.Retry(s.k.env.now()) })
	write("reconcile_fleet_rollout", "Ask the controller to reconcile a rollout now (reconcile.fluxcd.io/requestedAt); get_fleet_job says when it has.",
		func() ops.Mutation {
			return ops.RequestReconcile(s.k.env.now().UTC().Format(time.RFC3339Nano))
		})
	tool(server, "cancel_fleet_job", "Cancel a job: mode hold (always possible, nothing is undone) or rollback (to the known-good); a rollback under way cannot be cancelled (code CannotCancel, with the reason).",
		false, func(ctx context.Context, in cancelInput) (any, error) {
			ch, job, err := ops.Cancel(ctx, s.c, in.Job, in.Mode, in.Reason, s.k.env.now())
			if err != nil {
				return nil, err
			}
			return writeResult{Change: ch, Job: job}, nil
		})
	return server
}

func (s *mcpServer) apply(ctx context.Context, in rolloutInput, m ops.Mutation) (any, error) {
	_, ch, job, err := ops.Apply(ctx, s.c, s.namespace(in.Namespace), in.Name, m)
	if err != nil {
		return nil, err
	}
	return writeResult{Change: ch, Job: job}, nil
}

func (s *mcpServer) listNamespace(in listInput) string {
	if in.AllNamespaces {
		return ""
	}
	return s.namespace(in.Namespace)
}

func (s *mcpServer) listScope(in listInput) ([]client.ListOption, error) {
	opts, err := selectorOption(in.Selector)
	if err != nil {
		return nil, mcpError(err, ops.Ref{Kind: "selector"})
	}
	if !in.AllNamespaces {
		opts = append(opts, client.InNamespace(s.namespace(in.Namespace)))
	}
	return opts, nil
}

// mcpError is err as an *ops.Error: the command line's own errors (an exitError around a message)
// are Invalid when they are about the request, else classified as API errors about obj.
func mcpError(err error, obj ops.Ref) *ops.Error {
	var ee *exitError
	if errors.As(err, &ee) && ee.err != nil {
		var oe *ops.Error
		if errors.As(ee.err, &oe) {
			if oe.Object == nil && obj.Kind != "" {
				oe.Object = &obj
			}
			return oe
		}
		if cause := errors.Unwrap(ee.err); cause != nil {
			return ops.AsError(cause, obj)
		}
		// A message alone: a usage error, about the request.
		return ops.NewError(ops.CodeInvalid, nil, ee.err.Error(), ee.err)
	}
	return ops.AsError(err, obj)
}

// tool adds a tool whose handler returns a JSON result or an error: an error is a tool result with
// isError set and, as content and structured content, {"error": {"code", "message", "object"}}.
func tool[In any](server *mcp.Server, name, desc string, readOnly bool, h func(context.Context, In) (any, error)) {
	t := &mcp.Tool{Name: name, Description: desc, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: readOnly}}
	if !readOnly {
		destructive := name == "rollback_fleet_rollout" || name == "cancel_fleet_job"
		t.Annotations.DestructiveHint = &destructive
	}
	mcp.AddTool(server, t, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		out, err := h(ctx, in)
		if err == nil {
			return nil, out, nil
		}
		var oe *ops.Error
		if !errors.As(err, &oe) {
			oe = ops.AsError(err, ops.Ref{Kind: name})
		}
		body := map[string]*ops.Error{"error": oe}
		text, _ := json.Marshal(body)
		return &mcp.CallToolResult{IsError: true, StructuredContent: body, Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}}, nil, nil
	})
}
