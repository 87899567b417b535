package fleets

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

func fleetCluster(name string, reachable metav1.ConditionStatus) v1alpha1.FleetCluster {
	fc := v1alpha1.FleetCluster{}
	fc.Name, fc.Namespace = name, "fleet"
	if reachable != "" {
		fc.Status.Conditions = []metav1.Condition{
			{Type: v1alpha1.ReadyCondition, Status: metav1.ConditionTrue},
			{Type: v1alpha1.ReachableCondition, Status: reachable},
		}
	}
	return fc
}

func TestInventoryFrom(t *testing.T) {
	up := fleetCluster("up", metav1.ConditionTrue)
	up.Labels = map[string]string{"region": "eu"}
	up.Spec.OptIns = []string{"podinfo", "platform/*"}
	down := fleetCluster("down", metav1.ConditionFalse)
	down.Spec.Suspend = true
	unknown := fleetCluster("unknown", metav1.ConditionUnknown)
	fresh := fleetCluster("fresh", "")

	got := InventoryFrom([]v1alpha1.FleetCluster{up, down, unknown, fresh})
	want := Inventory{
		{Name: "up", Labels: map[string]string{"region": "eu"}, OptIns: []string{"podinfo", "platform/*"}, Reachability: Reachable},
		{Name: "down", Suspended: true, Reachability: Unreachable},
		{Name: "unknown", Reachability: ReachabilityUnknown},
		{Name: "fresh", Reachability: ReachabilityUnknown},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("InventoryFrom = %+v\nwant %+v", got, want)
	}

	// The inventory must not alias the informer cache: planning code may not change cached objects.
	up.Labels["region"] = "us"
	up.Spec.OptIns[0] = "changed"
	if got[0].Labels["region"] != "eu" || got[0].OptIns[0] != "podinfo" {
		t.Errorf("inventory aliases the FleetCluster: %+v", got[0])
	}
}

func TestInventoryFromPlans(t *testing.T) {
	// A FleetCluster's Reachable=False is planned like one with no condition yet, or True.
	inv := InventoryFrom([]v1alpha1.FleetCluster{
		fleetCluster("b", metav1.ConditionFalse), fleetCluster("a", ""), fleetCluster("c", metav1.ConditionTrue),
	})
	p, err := Plan(Input{Rollout: rollout(), Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := render(p), lines("all: a b c"); got != want {
		t.Errorf("plan:\n%s\nwant:\n%s", got, want)
	}
}

func TestReachabilityString(t *testing.T) {
	for r, want := range map[Reachability]string{
		Reachable: "Reachable=True", Unreachable: "Reachable=False", ReachabilityUnknown: "Reachable=Unknown",
	} {
		if got := r.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", r, got, want)
		}
	}
}
