package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
)

// getOptions are the flags every `get` subcommand shares.
type getOptions struct {
	k             *kubeOptions
	output        string
	allNamespaces bool
	selector      string
	watch         bool
}

func newGetCommand(k *kubeOptions) *cobra.Command {
	o := &getOptions{k: k}
	cmd := &cobra.Command{
		Use:   "get",
		Short: "List rollouts, clusters or receipts",
		Long: `get lists FleetRollouts, FleetClusters or GateReceipts of the namespace (-A: of every namespace),
or the one named; -o wide adds columns, and -w/--watch goes on printing a row each time one of
them changes, as kubectl get -w, until interrupted.`,
		Args: subcommandArgs,
		RunE: subcommandRun,
	}
	for _, sub := range []*cobra.Command{newGetRolloutsCommand(o), newGetClustersCommand(o), newGetReceiptsCommand(o)} {
		addOutputFlag(sub, &o.output)
		sub.Flags().Lookup("output").Usage = "output format: table, wide (more columns), name (kind/name), json, yaml or jsonpath=TEMPLATE (over the json document)"
		sub.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list the objects of every namespace")
		sub.Flags().StringVarP(&o.selector, "selector", "l", "", "list only the objects whose labels match this selector, as kubectl's -l (e.g. -l tidegate.dev/rollout=web)")
		sub.Flags().BoolVarP(&o.watch, "watch", "w", false, "after the list, print a row each time an object changes, until interrupted, as kubectl get -w (with -o json, one object per line)")
		cmd.AddCommand(sub)
	}
	return cmd
}

// subcommandArgs rejects an unknown subcommand of a command that only groups others.
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return usageError("unknown command %q for %q; the commands are %s", args[0], cmd.CommandPath(), strings.Join(names, ", "))
}

// subcommandRun prints the help of a command that only groups others when it is run alone.
func subcommandRun(cmd *cobra.Command, _ []string) error {
	return cmd.Help()
}

// maxOneArg accepts an optional NAME.
func maxOneArg(cmd *cobra.Command, args []string) error {
	if len(args) > 1 {
		return usageError("accepts at most one NAME, received %d; usage: %s", len(args), cmd.UseLine())
	}
	return nil
}

// list reads the objects of the namespace, of every namespace with -A, or the one named.
func (o *getOptions) list(ctx context.Context, c client.Client, ns string, args []string, list client.ObjectList, one client.Object, what string) error {
	if len(args) == 1 && o.selector != "" {
		return usageError("a %s is read by name or listed by -l, not both: drop %s or -l", what, args[0])
	}
	if len(args) == 1 {
		if o.allNamespaces {
			return usageError("a %s cannot be read by name across all namespaces: drop -A, or name its namespace with -n", what)
		}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: args[0]}, one); err != nil {
			return apiError(err, fmt.Sprintf("%s %s/%s", what, ns, args[0]))
		}
		return nil
	}
	opts, err := selectorOption(o.selector)
	if err != nil {
		return err
	}
	where := "namespace " + ns
	if !o.allNamespaces {
		opts = append(opts, client.InNamespace(ns))
	} else {
		where = "any namespace"
	}
	if err := c.List(ctx, list, opts...); err != nil {
		return apiError(err, fmt.Sprintf("listing %ss in %s", what, where))
	}
	return nil
}

func namesOf[T any](rows []T, name func(T) string) []string {
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, name(r))
	}
	return out
}

// selectorOption is the list option of a label selector as kubectl's -l takes it (none when empty).
func selectorOption(selector string) ([]client.ListOption, error) {
	if selector == "" {
		return nil, nil
	}
	sel, err := labels.Parse(selector)
	if err != nil {
		return nil, &exitError{code: exitUsage, err: ops.NewError(ops.CodeInvalid, nil, fmt.Sprintf("invalid label selector %q: %v", selector, err), err)}
	}
	return []client.ListOption{client.MatchingLabelsSelector{Selector: sel}}, nil
}

// noneFound says on stderr that a list is empty, as kubectl does.
func (o *getOptions) noneFound(w io.Writer, what, ns string) {
	if o.allNamespaces {
		fmt.Fprintf(w, "no %s found in any namespace\n", what)
		return
	}
	fmt.Fprintf(w, "no %s found in namespace %s\n", what, ns)
}

// withNamespace puts a NAMESPACE column first with -A.
func (o *getOptions) withNamespace(header []string) []string {
	if o.allNamespaces {
		return append([]string{"NAMESPACE"}, header...)
	}
	return header
}

func (o *getOptions) row(ns string, cells ...string) []string {
	if o.allNamespaces {
		return append([]string{ns}, cells...)
	}
	return cells
}

func byNamespaceName[T any](key func(T) (string, string)) func(a, b T) int {
	return func(a, b T) int {
		an, aname := key(a)
		bn, bname := key(b)
		if c := strings.Compare(an, bn); c != 0 {
			return c
		}
		return strings.Compare(aname, bname)
	}
}

// items is what -o json and -o yaml print for a list.
type items[T any] struct {
	Items []T `json:"items"`
}

// rolloutRow is one FleetRollout as `get rollouts` shows it.
type rolloutRow struct {
	Namespace string                   `json:"namespace"`
	Name      string                   `json:"name"`
	Phase     string                   `json:"phase"`
	Wave      string                   `json:"wave"`
	Candidate *v1alpha1.RevisionStatus `json:"candidate,omitempty"`
	KnownGood *v1alpha1.RevisionStatus `json:"knownGood,omitempty"`
	Ready     string                   `json:"ready"`
	Reason    string                   `json:"reason"`
	Message   string                   `json:"message"`
	Suspended bool                     `json:"suspended"`
	Hold      *v1alpha1.Hold           `json:"hold,omitempty"`
	// rollout is the object the row shows, for the columns of -o wide.
	rollout *v1alpha1.FleetRollout
}

func newGetRolloutsCommand(o *getOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "rollouts [NAME]",
		Aliases: []string{"rollout", "fleetrollouts", "fleetrollout", "fro"},
		Short:   "List FleetRollouts: phase, wave, candidate and known-good revisions, Ready",
		Long: `rollouts lists FleetRollouts like flux get: NAME, PHASE, WAVE (the wave in progress), CANDIDATE
and KNOWN-GOOD (the first 12 characters of their commit or digest), READY (the Ready condition's
status) and MESSAGE (its message). -o wide adds CANDIDATE-DIGEST and KNOWN-GOOD-DIGEST (the
algorithm and first 12 characters of their artifacts' digests), POLICY (spec.policy's source, or
builtin), SUSPENDED and LAST TRANSITION (since Ready last changed).`,
		Example: `  tidegate get rollouts -n fleet
  tidegate get rollouts -A -o json
  tidegate get rollouts web -o wide --watch`,
		Args: maxOneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.k.clientFor(o.output, checkListOutput)
			if err != nil {
				return err
			}
			var list v1alpha1.FleetRolloutList
			var one v1alpha1.FleetRollout
			if err := o.list(cmd.Context(), c, ns, args, &list, &one, "fleetrollout"); err != nil {
				return err
			}
			if len(args) == 1 {
				list.Items = []v1alpha1.FleetRollout{one}
			}
			v := view[rolloutRow]{
				kind: "fleetrollout", plural: "fleetrollouts",
				key:    func(r rolloutRow) (string, string) { return r.Namespace, r.Name },
				header: []string{"NAME", "PHASE", "WAVE", "CANDIDATE", "KNOWN-GOOD", "READY", "MESSAGE"},
				cells: func(r rolloutRow) []string {
					return []string{r.Name, r.Phase, r.Wave, shortRevision(r.Candidate), shortRevision(r.KnownGood), r.Ready, oneLine(r.Message)}
				},
				wide: rolloutWide, wideCells: func(r rolloutRow) []string { return rolloutWideCells(o.k.env.now(), r) },
			}
			t, err := printRows(cmd, o, v, ns, rolloutRows(list.Items))
			if err != nil || !o.watch {
				return err
			}
			return follow(cmd, o, c, v, ns, args, &v1alpha1.FleetRolloutList{}, resourceVersion(args, &list, &one), t,
				func(obj client.Object) (rolloutRow, bool) { return toRolloutRow(obj.(*v1alpha1.FleetRollout)), true })
		},
	}
}

func toRolloutRow(fr *v1alpha1.FleetRollout) rolloutRow {
	ready, reason, message := readyOf(fr.Status.Conditions)
	return rolloutRow{
		Namespace: fr.Namespace,
		Name:      fr.Name,
		Phase:     fr.Status.Phase,
		Wave:      fr.Status.CurrentWave,
		Candidate: fr.Status.Candidate,
		KnownGood: fr.Status.LastKnownGood,
		Ready:     ready,
		Reason:    reason,
		Message:   message,
		Suspended: fr.Spec.Suspend,
		Hold:      fr.Spec.Hold,
		rollout:   fr,
	}
}

// clusterRow is one FleetCluster as `get clusters` shows it.
type clusterRow struct {
	Namespace     string       `json:"namespace"`
	Name          string       `json:"name"`
	ServerVersion string       `json:"serverVersion"`
	Ready         string       `json:"ready"`
	Reason        string       `json:"reason"`
	Message       string       `json:"message"`
	LastSeen      *metav1.Time `json:"lastSeen,omitempty"`
	Suspended     bool         `json:"suspended"`
	// labels are the cluster's, for -o wide (wave selectors match them).
	labels map[string]string
}

func newGetClustersCommand(o *getOptions) *cobra.Command {
	return &cobra.Command{
		Use:     "clusters [NAME]",
		Aliases: []string{"cluster", "fleetclusters", "fleetcluster", "fc"},
		Short:   "List FleetClusters: server version, Ready, when last seen",
		Long: `clusters lists FleetClusters: NAME, VERSION (the member API server's), READY (the Ready condition's
status), LAST SEEN (lastObservedTime: how long ago the member API server last answered something new;
status is written only when the cluster changes) and MESSAGE (Ready's message). -o wide adds
SUSPENDED and LABELS (which wave selectors match).`,
		Args: maxOneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.k.clientFor(o.output, checkListOutput)
			if err != nil {
				return err
			}
			var list v1alpha1.FleetClusterList
			var one v1alpha1.FleetCluster
			if err := o.list(cmd.Context(), c, ns, args, &list, &one, "fleetcluster"); err != nil {
				return err
			}
			if len(args) == 1 {
				list.Items = []v1alpha1.FleetCluster{one}
			}
			v := view[clusterRow]{
				kind: "fleetcluster", plural: "fleetclusters",
				key:    func(r clusterRow) (string, string) { return r.Namespace, r.Name },
				header: []string{"NAME", "VERSION", "READY", "LAST SEEN", "MESSAGE"},
				cells: func(r clusterRow) []string {
					return []string{r.Name, r.ServerVersion, r.Ready, age(o.k.env.now(), r.LastSeen), oneLine(r.Message)}
				},
				wide: clusterWide, wideCells: clusterWideCells,
			}
			t, err := printRows(cmd, o, v, ns, clusterRows(list.Items))
			if err != nil || !o.watch {
				return err
			}
			return follow(cmd, o, c, v, ns, args, &v1alpha1.FleetClusterList{}, resourceVersion(args, &list, &one), t,
				func(obj client.Object) (clusterRow, bool) {
					return clusterRows([]v1alpha1.FleetCluster{*obj.(*v1alpha1.FleetCluster)})[0], true
				})
		},
	}
}

// receiptRow is one GateReceipt as `get receipts` shows it.
type receiptRow struct {
	Namespace    string                   `json:"namespace"`
	Name         string                   `json:"name"`
	Rollout      string                   `json:"rollout"`
	Gate         string                   `json:"gate"`
	Wave         string                   `json:"wave"`
	Result       string                   `json:"result"`
	Candidate    v1alpha1.RevisionStatus  `json:"candidate"`
	KnownGood    *v1alpha1.RevisionStatus `json:"knownGood,omitempty"`
	Targets      []string                 `json:"targets,omitempty"`
	PolicyDigest string                   `json:"policyDigest,omitempty"`
	Reasons      []string                 `json:"reasons,omitempty"`
	Limits       []string                 `json:"limits,omitempty"`
	EvaluatedAt  metav1.Time              `json:"evaluatedAt"`
	// evidenceDigest is spec.evidenceDigest, for -o wide.
	evidenceDigest string
}

func newGetReceiptsCommand(o *getOptions) *cobra.Command {
	var rollout string
	cmd := &cobra.Command{
		Use:     "receipts [NAME]",
		Aliases: []string{"receipt", "gatereceipts", "gatereceipt", "grc"},
		Short:   "List GateReceipts: gate, wave, result, candidate",
		Long: `receipts lists GateReceipts, of one rollout with --rollout, oldest decision first: NAME, ROLLOUT,
GATE, WAVE, RESULT, CANDIDATE (the first 12 characters of its commit or digest) and AGE (since the
decision, spec.evaluatedAt). -o wide adds KNOWN-GOOD, TARGETS (how many), POLICY-DIGEST and
EVIDENCE-DIGEST; -o json and -o yaml add the targets, policy digest and reasons.`,
		Example: `  tidegate get receipts --rollout web
  tidegate get receipts --rollout web -o json | jq '.items[] | select(.result == "Fail")'`,
		Args: maxOneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.k.clientFor(o.output, checkListOutput)
			if err != nil {
				return err
			}
			var list v1alpha1.GateReceiptList
			var one v1alpha1.GateReceipt
			if err := o.list(cmd.Context(), c, ns, args, &list, &one, "gatereceipt"); err != nil {
				return err
			}
			if len(args) == 1 {
				list.Items = []v1alpha1.GateReceipt{one}
			}
			v := view[receiptRow]{
				kind: "gatereceipt", plural: "gatereceipts",
				key:    func(r receiptRow) (string, string) { return r.Namespace, r.Name },
				header: []string{"NAME", "ROLLOUT", "GATE", "WAVE", "RESULT", "CANDIDATE", "AGE"},
				cells: func(r receiptRow) []string {
					return []string{r.Name, r.Rollout, r.Gate, r.Wave, r.Result, shortRevision(&r.Candidate), age(o.k.env.now(), &r.EvaluatedAt)}
				},
				wide: receiptWide, wideCells: receiptWideCells,
			}
			if rollout != "" {
				v.plural = "gatereceipts of fleetrollout " + rollout
			}
			t, err := printRows(cmd, o, v, ns, receiptRows(list.Items, rollout))
			if err != nil || !o.watch {
				return err
			}
			return follow(cmd, o, c, v, ns, args, &v1alpha1.GateReceiptList{}, resourceVersion(args, &list, &one), t,
				func(obj client.Object) (receiptRow, bool) {
					rows := receiptRows([]v1alpha1.GateReceipt{*obj.(*v1alpha1.GateReceipt)}, rollout)
					if len(rows) == 0 {
						return receiptRow{}, false
					}
					return rows[0], true
				})
		},
	}
	cmd.Flags().StringVar(&rollout, "rollout", "", "only the receipts of this FleetRollout")
	return cmd
}

// rolloutRows are the rows of rollouts, by namespace and name.
func rolloutRows(rollouts []v1alpha1.FleetRollout) []rolloutRow {
	rows := make([]rolloutRow, 0, len(rollouts))
	for i := range rollouts {
		rows = append(rows, toRolloutRow(&rollouts[i]))
	}
	slices.SortFunc(rows, byNamespaceName(func(r rolloutRow) (string, string) { return r.Namespace, r.Name }))
	return rows
}

// clusterRows are the rows of clusters, by namespace and name.
func clusterRows(clusters []v1alpha1.FleetCluster) []clusterRow {
	rows := make([]clusterRow, 0, len(clusters))
	for _, fc := range clusters {
		ready, reason, message := readyOf(fc.Status.Conditions)
		rows = append(rows, clusterRow{
			Namespace: fc.Namespace, Name: fc.Name, ServerVersion: fc.Status.ServerVersion,
			Ready: ready, Reason: reason, Message: message, LastSeen: fc.Status.LastObservedTime,
			Suspended: fc.Spec.Suspend, labels: fc.Labels,
		})
	}
	slices.SortFunc(rows, byNamespaceName(func(r clusterRow) (string, string) { return r.Namespace, r.Name }))
	return rows
}

// receiptRows are the rows of receipts (of rollout only, when it is set), oldest decision first.
func receiptRows(receipts []v1alpha1.GateReceipt, rollout string) []receiptRow {
	rows := make([]receiptRow, 0, len(receipts))
	for _, rc := range receipts {
		// spec.rollout, not the label, says whose receipt it is.
		if rollout != "" && rc.Spec.Rollout != rollout {
			continue
		}
		rows = append(rows, receiptRow{
			Namespace: rc.Namespace, Name: rc.Name, Rollout: rc.Spec.Rollout, Gate: rc.Spec.Gate,
			Wave: rc.Spec.Wave, Result: rc.Spec.Result, Candidate: rc.Spec.Candidate, KnownGood: rc.Spec.KnownGood,
			Targets: rc.Spec.Targets, PolicyDigest: rc.Spec.PolicyDigest, Reasons: rc.Spec.Reasons, Limits: rc.Spec.Limits,
			EvaluatedAt: rc.Spec.EvaluatedAt, evidenceDigest: rc.Spec.EvidenceDigest,
		})
	}
	slices.SortFunc(rows, func(a, b receiptRow) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		if c := strings.Compare(a.Rollout, b.Rollout); c != 0 {
			return c
		}
		if c := a.EvaluatedAt.Compare(b.EvaluatedAt.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return rows
}
