package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/fluxcd/cli-utils/pkg/object"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	fluxmeta "github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/ops"
)

// treeNode is one object of `tree`; -o json and -o yaml print the tree of them.
type treeNode struct {
	Kind      string `json:"kind"`
	Group     string `json:"group,omitempty"`
	Version   string `json:"version,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Role of a pinned source: candidate, known-good, or empty for an older one.
	Role string `json:"role,omitempty"`
	// Wave and Cluster of a member: a per-cluster Kustomization, or HelmRelease of a chart rollout.
	Wave    string `json:"wave,omitempty"`
	Cluster string `json:"cluster,omitempty"`
	// Revision of a source's artifact, or the one a member last applied (a HelmRelease's: the OCI
	// digest of its latest release's chart).
	Revision string `json:"revision,omitempty"`
	// Ready is the Ready condition's status of a source or member.
	Ready    string      `json:"ready,omitempty"`
	Children []*treeNode `json:"children,omitempty"`
}

func newTreeCommand(k *kubeOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "tree ROLLOUT",
		Short: "Show a rollout's pinned sources, per-cluster Kustomizations or HelmReleases and what they applied",
		Long: `tree shows what a FleetRollout owns, like flux tree: its pinned sources (GitRepository or
OCIRepository labelled tidegate.dev/rollout, with the revision of their artifact: the candidate's,
the known-good's, older ones), under each source the per-cluster members that point at it (with
their wave, the revision they last applied and Ready), and under each member the objects of its
inventory (status.inventory), as Kind/namespace/name. The members are Kustomizations, or
HelmReleases for a rollout of a Helm chart (spec.chart), whose revision is the OCI digest of the
chart their latest release installed.`,
		Example: `  tidegate tree web -n fleet`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.clientFor(output, checkKubeOutput)
			if err != nil {
				return err
			}
			root, err := buildTree(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			return printAnswer(cmd, output, root, func(w io.Writer) error { printTree(w, root); return nil }, false)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func buildTree(ctx context.Context, c client.Client, ns, name string) (*treeNode, error) {
	fr, err := getRollout(ctx, c, ns, name)
	if err != nil {
		return nil, err
	}
	root := &treeNode{Kind: v1alpha1.FleetRolloutKind, Namespace: ns, Name: name}
	owned := client.MatchingLabels{v1alpha1.RolloutLabel: name}

	// Pinned sources: the candidate's first, then the known-good's, then older ones by name.
	var sources []*treeNode
	var gits sourcev1.GitRepositoryList
	if err := c.List(ctx, &gits, client.InNamespace(ns), owned); err != nil && !meta.IsNoMatchError(err) {
		return nil, apiError(err, "listing the pinned GitRepositories of fleetrollout "+ns+"/"+name)
	}
	for i := range gits.Items {
		s := &gits.Items[i]
		sources = append(sources, sourceNode(fr, sourcev1.GitRepositoryKind, s, s.Status.Artifact, s.GetConditions()))
	}
	var ocis sourcev1.OCIRepositoryList
	if err := c.List(ctx, &ocis, client.InNamespace(ns), owned); err != nil && !meta.IsNoMatchError(err) {
		return nil, apiError(err, "listing the pinned OCIRepositories of fleetrollout "+ns+"/"+name)
	}
	for i := range ocis.Items {
		s := &ocis.Items[i]
		sources = append(sources, sourceNode(fr, sourcev1.OCIRepositoryKind, s, s.Status.Artifact, s.GetConditions()))
	}
	rank := map[string]int{"candidate": 0, "known-good": 1, "": 2}
	slices.SortFunc(sources, func(a, b *treeNode) int {
		if d := rank[a.Role] - rank[b.Role]; d != 0 {
			return d
		}
		return strings.Compare(a.Kind+"/"+a.Name, b.Kind+"/"+b.Name)
	})
	root.Children = sources

	kind := engine.MemberKind(fr)
	members, err := ops.ListMembers(ctx, c, fr, client.InNamespace(ns), owned)
	if err != nil {
		return nil, apiError(err, "listing the "+kind+"s of fleetrollout "+ns+"/"+name)
	}
	slices.SortFunc(members, func(a, b engine.Object) int { return strings.Compare(a.GetName(), b.GetName()) })
	for _, m := range members {
		o := engine.Observe(m)
		n := &treeNode{
			Kind: kind, Namespace: m.GetNamespace(), Name: m.GetName(),
			Wave: m.GetLabels()[v1alpha1.WaveLabel], Cluster: m.GetLabels()[v1alpha1.ClusterLabel],
			Revision: o.LastApplied, Ready: string(o.Ready),
		}
		if inv, _ := engine.MemberInventory(m); inv != nil {
			for _, e := range inv.Entries {
				n.Children = append(n.Children, inventoryNode(e))
			}
		}
		// Under the pinned source it points at; under the rollout when that is not one of its pins.
		parent := root
		srcKind, srcNS, srcName := engine.MemberSourceRef(m)
		for _, s := range sources {
			if s.Kind == srcKind && s.Name == srcName && (srcNS == "" || srcNS == ns) {
				parent = s
				break
			}
		}
		parent.Children = append(parent.Children, n)
	}
	return root, nil
}

func sourceNode(fr *v1alpha1.FleetRollout, kind string, obj client.Object, artifact *fluxmeta.Artifact, conds []metav1.Condition) *treeNode {
	n := &treeNode{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName(), Revision: obj.GetAnnotations()[v1alpha1.RevisionAnnotation]}
	if artifact != nil && artifact.Revision != "" {
		n.Revision = artifact.Revision
	}
	switch {
	case fr.Status.Candidate != nil && fr.Status.Candidate.Source == n.Name:
		n.Role = "candidate"
	case fr.Status.LastKnownGood != nil && fr.Status.LastKnownGood.Source == n.Name:
		n.Role = "known-good"
	}
	n.Ready, _, _ = readyOf(conds)
	return n
}

// inventoryNode is one entry of a member's inventory (engine.MemberInventory), whose ID is
// Flux's "<namespace>_<name>_<group>_<kind>".
func inventoryNode(e kustomizev1.ResourceRef) *treeNode {
	id, err := object.ParseObjMetadata(e.ID)
	if err != nil {
		return &treeNode{Kind: "?", Name: e.ID}
	}
	return &treeNode{Kind: id.GroupKind.Kind, Group: id.GroupKind.Group, Version: e.Version, Namespace: id.Namespace, Name: id.Name}
}

// label is how a node prints: Kind/namespace/name, then what it says about itself.
func (n *treeNode) label() string {
	s := n.Kind + "/"
	if n.Namespace != "" {
		s += n.Namespace + "/"
	}
	s += n.Name
	var notes []string
	if n.Role != "" {
		notes = append(notes, n.Role)
	}
	if n.Wave != "" {
		notes = append(notes, "wave "+n.Wave)
	}
	if n.Revision != "" {
		notes = append(notes, n.Revision)
	} else if n.Kind == kustomizev1.KustomizationKind || n.Kind == helmv2.HelmReleaseKind {
		notes = append(notes, "nothing applied yet")
	}
	if n.Ready != "" {
		notes = append(notes, "Ready="+n.Ready)
	}
	if len(notes) > 0 {
		s += " (" + strings.Join(notes, ", ") + ")"
	}
	return s
}

// printTree prints the tree as flux tree does.
func printTree(w io.Writer, root *treeNode) {
	fmt.Fprintln(w, root.label())
	printChildren(w, root.Children, "")
}

func printChildren(w io.Writer, children []*treeNode, prefix string) {
	for i, c := range children {
		branch, indent := "├── ", "│   "
		if i == len(children)-1 {
			branch, indent = "└── ", "    "
		}
		fmt.Fprintln(w, prefix+branch+c.label())
		printChildren(w, c.Children, prefix+indent)
	}
}
