package fleets

import (
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Reachability is what a FleetCluster's Reachable condition last said.
type Reachability int

const (
	// ReachabilityUnknown: no Reachable condition yet, or Unknown. Planned; the deploySafe preflight decides.
	ReachabilityUnknown Reachability = iota
	// Reachable: the member API server answered through the kubeconfig.
	Reachable
	// Unreachable: the member API server did not answer. Planned all the same (its wave's preflight
	// holds on it); a catch-up does not start for it until it answers.
	Unreachable
)

// String returns the condition status the value was read from, for notes and test output.
func (r Reachability) String() string {
	switch r {
	case Reachable:
		return "Reachable=True"
	case Unreachable:
		return "Reachable=False"
	default:
		return "Reachable=Unknown"
	}
}

// Cluster is one member of the fleet as the planner sees it: only what decides wave membership.
type Cluster struct {
	// Name of the FleetCluster.
	Name string
	// Labels of the FleetCluster, matched by the clusterSelector and wave selectors.
	Labels map[string]string
	// OptIns from spec.optIns: SystemConfiguration rollouts accepted, by name or "<owner>/*".
	OptIns []string
	// Suspended from spec.suspend: excluded from new waves.
	Suspended bool
	// Reachability from the Reachable condition.
	Reachability Reachability
}

// Inventory is the fleet a rollout plans over: the FleetClusters of the rollout's namespace.
// Names must be unique; Plan refuses an inventory that repeats one.
type Inventory []Cluster

// InventoryFrom reads the planner's view of FleetClusters. The caller passes the FleetClusters of the
// rollout's namespace only (clusters live beside the rollouts that target them); namespaces are not
// checked here because Cluster carries none. Labels and opt-ins are copied so the inventory does not
// alias the informer cache.
func InventoryFrom(clusters []v1alpha1.FleetCluster) Inventory {
	inv := make(Inventory, 0, len(clusters))
	for i := range clusters {
		fc := &clusters[i]
		c := Cluster{
			Name:         fc.Name,
			Suspended:    fc.Spec.Suspend,
			Reachability: reachabilityOf(fc.Status.Conditions),
		}
		if len(fc.Labels) > 0 {
			c.Labels = make(map[string]string, len(fc.Labels))
			for k, v := range fc.Labels {
				c.Labels[k] = v
			}
		}
		if len(fc.Spec.OptIns) > 0 {
			c.OptIns = append([]string(nil), fc.Spec.OptIns...)
		}
		inv = append(inv, c)
	}
	return inv
}

func reachabilityOf(conds []metav1.Condition) Reachability {
	c := apimeta.FindStatusCondition(conds, v1alpha1.ReachableCondition)
	if c == nil {
		return ReachabilityUnknown
	}
	switch c.Status {
	case metav1.ConditionTrue:
		return Reachable
	case metav1.ConditionFalse:
		return Unreachable
	default:
		return ReachabilityUnknown
	}
}

// names returns the set of cluster names in the inventory.
func (inv Inventory) names() map[string]struct{} {
	set := make(map[string]struct{}, len(inv))
	for _, c := range inv {
		set[c.Name] = struct{}{}
	}
	return set
}
