package fleets

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// cl builds a reachable, unsuspended cluster with labels given as key, value pairs.
func cl(name string, kv ...string) Cluster {
	c := Cluster{Name: name, Reachability: Reachable}
	if len(kv) > 0 {
		c.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			c.Labels[kv[i]] = kv[i+1]
		}
	}
	return c
}

func suspended(c Cluster) Cluster    { c.Suspended = true; return c }
func unreachable(c Cluster) Cluster  { c.Reachability = Unreachable; return c }
func unknownReach(c Cluster) Cluster { c.Reachability = ReachabilityUnknown; return c }
func optIn(c Cluster, o ...string) Cluster {
	c.OptIns = append(c.OptIns, o...)
	return c
}

// named builds n clusters c01..cNN with no labels.
func named(n int) Inventory {
	inv := make(Inventory, 0, n)
	for i := 1; i <= n; i++ {
		inv = append(inv, cl(fmt.Sprintf("c%02d", i)))
	}
	return inv
}

func sel(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func expr(key string, op metav1.LabelSelectorOperator, vals ...string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: vals}}}
}

func i32(v int32) *int32 { return &v }

func wv(name string, s *metav1.LabelSelector) v1alpha1.Wave {
	return v1alpha1.Wave{Name: name, Selector: s}
}

func count(name string, s *metav1.LabelSelector, n int32) v1alpha1.Wave {
	return v1alpha1.Wave{Name: name, Selector: s, Count: i32(n)}
}

func percent(name string, s *metav1.LabelSelector, p int32) v1alpha1.Wave {
	return v1alpha1.Wave{Name: name, Selector: s, Percent: i32(p)}
}

func rollout(waves ...v1alpha1.Wave) *v1alpha1.FleetRollout {
	r := &v1alpha1.FleetRollout{}
	r.Name, r.Namespace = "podinfo", "fleet"
	r.Spec.Waves = waves
	return r
}

func sysConfig(r *v1alpha1.FleetRollout, owner string) *v1alpha1.FleetRollout {
	r.Spec.Class, r.Spec.Owner = v1alpha1.ClassSystemConfiguration, owner
	return r
}

func withClusterSelector(r *v1alpha1.FleetRollout, s *metav1.LabelSelector) *v1alpha1.FleetRollout {
	r.Spec.ClusterSelector = s
	return r
}

// render writes a plan as one line per wave ("canary: a b") then one per skip ("skip a: Cause"),
// so table tests read like the plan they expect.
func render(p WavePlan) string {
	var lines []string
	for _, w := range p.Waves {
		lines = append(lines, strings.TrimSpace(w.Name+": "+strings.Join(w.Clusters, " ")))
	}
	for _, s := range p.Skipped {
		lines = append(lines, fmt.Sprintf("skip %s: %s", s.Cluster, s.Cause))
	}
	return strings.Join(lines, "\n")
}

func lines(s ...string) string { return strings.Join(s, "\n") }
