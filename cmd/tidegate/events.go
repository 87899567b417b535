package main

import (
	"context"
	"slices"
	"strings"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/internal/ops"
)

// eventRow is one event as `events` shows it.
type eventRow struct {
	LastSeen  metav1.Time `json:"lastSeen"`
	Type      string      `json:"type"`
	Reason    string      `json:"reason"`
	Kind      string      `json:"kind"`
	Name      string      `json:"name"`
	Message   string      `json:"message"`
	Count     int32       `json:"count,omitempty"`
	Component string      `json:"component,omitempty"`
}

func newEventsCommand(k *kubeOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "events ROLLOUT",
		Short: "Show the events of a rollout, its Kustomizations or HelmReleases and its pinned sources",
		Long: `events shows the events (core/v1 and events.k8s.io/v1, one and the same in the API) of a
FleetRollout, of its per-cluster members (Kustomizations, or HelmReleases for a rollout of a Helm
chart) and of its pinned sources, oldest first, like flux events: LAST SEEN, TYPE, REASON, OBJECT
and MESSAGE. The API server keeps events for an hour by
default; the receipts (tidegate get receipts) keep the gate decisions.`,
		Example: `  tidegate events web -n fleet`,
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := k.clientFor(output, checkKubeOutput)
			if err != nil {
				return err
			}
			rows, err := rolloutEvents(cmd.Context(), c, ns, args[0])
			if err != nil {
				return err
			}
			if output != outputTable {
				return writeData(cmd.OutOrStdout(), output, items[eventRow]{Items: rows})
			}
			if len(rows) == 0 {
				cmd.PrintErrf("no events found for fleetrollout %s/%s\n", ns, args[0])
				return nil
			}
			now := k.env.now()
			t := &table{header: []string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"}}
			for _, r := range rows {
				t.add(age(now, &r.LastSeen), r.Type, r.Reason, r.Kind+"/"+r.Name, oneLine(r.Message))
			}
			return t.write(cmd.OutOrStdout())
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func rolloutEvents(ctx context.Context, c client.Client, ns, name string) ([]eventRow, error) {
	fr, err := getRollout(ctx, c, ns, name)
	if err != nil {
		return nil, err
	}
	// The objects whose events are shown, by kind and name.
	objects := map[string]bool{v1alpha1.FleetRolloutKind + "/" + name: true}
	owned := []client.ListOption{client.InNamespace(ns), client.MatchingLabels{v1alpha1.RolloutLabel: name}}
	kind := engine.MemberKind(fr)
	members, err := ops.ListMembers(ctx, c, fr, owned...)
	if err != nil {
		return nil, apiError(err, "listing the "+kind+"s of fleetrollout "+ns+"/"+name)
	}
	for _, m := range members {
		objects[kind+"/"+m.GetName()] = true
	}
	var gits sourcev1.GitRepositoryList
	if err := c.List(ctx, &gits, owned...); err != nil && !meta.IsNoMatchError(err) {
		return nil, apiError(err, "listing the pinned GitRepositories of fleetrollout "+ns+"/"+name)
	}
	for _, s := range gits.Items {
		objects[sourcev1.GitRepositoryKind+"/"+s.Name] = true
	}
	var ocis sourcev1.OCIRepositoryList
	if err := c.List(ctx, &ocis, owned...); err != nil && !meta.IsNoMatchError(err) {
		return nil, apiError(err, "listing the pinned OCIRepositories of fleetrollout "+ns+"/"+name)
	}
	for _, s := range ocis.Items {
		objects[sourcev1.OCIRepositoryKind+"/"+s.Name] = true
	}

	var events corev1.EventList
	if err := c.List(ctx, &events, client.InNamespace(ns)); err != nil {
		return nil, apiError(err, "listing the events of namespace "+ns)
	}
	rows := []eventRow{}
	for _, e := range events.Items {
		o := e.InvolvedObject
		if !objects[o.Kind+"/"+o.Name] || (o.Namespace != "" && o.Namespace != ns) {
			continue
		}
		component := e.ReportingController
		if component == "" {
			component = e.Source.Component
		}
		rows = append(rows, eventRow{
			LastSeen: eventTime(&e), Type: e.Type, Reason: e.Reason, Kind: o.Kind, Name: o.Name,
			Message: e.Message, Count: e.Count, Component: component,
		})
	}
	slices.SortStableFunc(rows, func(a, b eventRow) int {
		if c := a.LastSeen.Compare(b.LastSeen.Time); c != 0 {
			return c
		}
		if c := strings.Compare(a.Kind+"/"+a.Name, b.Kind+"/"+b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Reason+a.Message, b.Reason+b.Message)
	})
	return rows, nil
}

// eventTime is when an event was last seen, whichever API wrote it.
func eventTime(e *corev1.Event) metav1.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return metav1.NewTime(e.Series.LastObservedTime.Time)
	case !e.EventTime.IsZero():
		return metav1.NewTime(e.EventTime.Time)
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp
	}
	return e.CreationTimestamp
}
