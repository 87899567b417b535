package main

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// completionTimeout bounds how long a completion waits for the hub: a shell that waits longer
// for a TAB than for the command itself is worse than one that completes nothing.
const completionTimeout = 5 * time.Second

// The formats each kind of command takes with -o, for the completion of --output.
var (
	readFormats   = []string{outputTable, outputJSON, outputYAML, outputJSONPath}
	listFormats   = []string{outputTable, outputWide, outputName, outputJSON, outputYAML, outputJSONPath}
	writeFormats  = []string{outputJSON}
	policyFormats = []string{outputTable, outputJSON}
)

// completion is what the shell completes for one command: the names of the kind its arguments
// name (the kind of a FleetRollout, FleetCluster or GateReceipt; "" for none), how many it takes
// (0: any number), and the values of -o.
type completion struct {
	kind    string
	maxArgs int
	outputs []string
}

// completions are keyed by the command's path below the root ("get rollouts"). A test checks that
// every command with -o has an entry, so that a new command is not forgotten here.
var completions = map[string]completion{
	"get rollouts":      {v1alpha1.FleetRolloutKind, 1, listFormats},
	"get clusters":      {v1alpha1.FleetClusterKind, 1, listFormats},
	"get receipts":      {v1alpha1.GateReceiptKind, 1, listFormats},
	"status":            {v1alpha1.FleetRolloutKind, 1, readFormats},
	"tree":              {v1alpha1.FleetRolloutKind, 1, readFormats},
	"events":            {v1alpha1.FleetRolloutKind, 1, readFormats},
	"hold":              {v1alpha1.FleetRolloutKind, 1, writeFormats},
	"resume":            {v1alpha1.FleetRolloutKind, 1, writeFormats},
	"suspend":           {v1alpha1.FleetRolloutKind, 1, writeFormats},
	"approve":           {v1alpha1.FleetRolloutKind, 1, writeFormats},
	"rollback":          {v1alpha1.FleetRolloutKind, 1, writeFormats},
	"retry":             {v1alpha1.FleetRolloutKind, 1, writeFormats},
	"reconcile":         {v1alpha1.FleetRolloutKind, 1, nil},
	"receipts verify":   {v1alpha1.GateReceiptKind, 0, readFormats},
	"receipts evidence": {v1alpha1.GateReceiptKind, 1, []string{outputJSON, outputYAML}},
	"version":           {"", 0, readFormats},
	"check":             {"", 0, readFormats},
	"policy vet":        {"", 0, policyFormats},
	"policy eval":       {"", 0, policyFormats},
	"policy test":       {"", 0, policyFormats},
	"policy replay":     {"", 0, policyFormats},
	"revision":          {v1alpha1.FleetClusterKind, 1, readFormats},
	"receipts explain":  {v1alpha1.GateReceiptKind, 1, readFormats},
	"preview values":    {"", 0, readFormats},
	"preview policy":    {"", 0, readFormats},
}

// commandPath is the path of c below the root, such as "get rollouts", whatever the root is
// displayed as (tidegate, flux fleet).
func commandPath(c *cobra.Command) string {
	var names []string
	for ; c.HasParent(); c = c.Parent() {
		names = append([]string{c.Name()}, names...)
	}
	return strings.Join(names, " ")
}

// addCompletions lets the shell complete, in the commands of the tree under root, the names of
// the rollouts, clusters and receipts on the hub (in the namespace of -n or the kubeconfig
// context), the rollout of --rollout, and the formats of -o.
func addCompletions(root *cobra.Command, k *kubeOptions) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		comp, ok := completions[commandPath(c)]
		if !ok {
			return
		}
		if comp.kind != "" {
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				if comp.maxArgs > 0 && len(args) >= comp.maxArgs {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return k.completeNames(cmd.Context(), comp.kind, toComplete, args), cobra.ShellCompDirectiveNoFileComp
			}
		}
		if c.Flags().Lookup("rollout") != nil {
			_ = c.RegisterFlagCompletionFunc("rollout", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return k.completeNames(cmd.Context(), v1alpha1.FleetRolloutKind, toComplete, nil), cobra.ShellCompDirectiveNoFileComp
			})
		}
		if c.Flags().Lookup("output") != nil && comp.outputs != nil {
			_ = c.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
				// jsonpath= goes on with a template: no space after it.
				return comp.outputs, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
			})
		}
	}
	walk(root)
}

// completeNames lists the names of the objects of kind in the namespace that start with prefix,
// leaving out those already on the command line. A hub that cannot be asked completes nothing:
// the shell has no way to show an error, so it goes to cobra's completion debug log.
func (k *kubeOptions) completeNames(ctx context.Context, kind, prefix string, given []string) []cobra.Completion {
	c, ns, err := k.client()
	if err != nil {
		cobra.CompDebugln(err.Error(), false)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	// Only the names are needed: a metadata list carries no specs, statuses or evidence.
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(kind + "List"))
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		cobra.CompDebugln(err.Error(), false)
		return nil
	}
	var names []cobra.Completion
	for _, o := range list.Items {
		if strings.HasPrefix(o.Name, prefix) && !slices.Contains(given, o.Name) {
			names = append(names, o.Name)
		}
	}
	slices.Sort(names)
	return names
}
