package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/internal/testbin"
)

// startRoleAggregation runs kube-controller-manager against the hub with only its
// clusterrole-aggregation controller, the one that fills the built-in view, edit and admin
// ClusterRoles from the roles labelled to aggregate into them. It serves nothing (no port).
func startRoleAggregation(t *testing.T) {
	t.Helper()
	dir, err := testbin.Dir("")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testbin.KubeControllerManager(dir)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, adminKubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--controllers=clusterrole-aggregation",
		"--use-service-account-credentials=false", "--leader-elect=false", "--secure-port=0")
	log, err := os.Create(filepath.Join(t.TempDir(), "kube-controller-manager.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("kube-controller-manager's log:\n%s", b)
		}
	})
}

// Whoever the built-in view role is bound to in a namespace reads its FleetRollouts, FleetClusters
// and GateReceipts there and changes nothing; the edit role adds writes of FleetRollouts (approve,
// hold, rollback) and FleetClusters, never of a receipt or a status: the roles of
// config/rbac/aggregate_roles.yaml, aggregated by kube-controller-manager as on any cluster.
func TestDeployUserRolesAggregate(t *testing.T) {
	mustBeInstalled(t)
	ctx := hub(t, 3*time.Minute)
	startRoleAggregation(t)

	// The built-in roles carry tidegate's rules once the aggregation controller ran.
	for _, role := range []string{"view", "edit", "admin"} {
		waitFor(ctx, t, 2*time.Minute, "tidegate's rules in the built-in "+role+" ClusterRole", func() (bool, string) {
			var cr rbacv1.ClusterRole
			if err := admin.Get(ctx, client.ObjectKey{Name: role}, &cr); err != nil {
				return false, err.Error()
			}
			return slices.ContainsFunc(cr.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.APIGroups, "tidegate.dev") }),
				fmt.Sprintf("%+v", cr.Rules)
		})
	}

	for _, b := range []struct{ user, role string }{{"viewer", "view"}, {"editor", "edit"}} {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: b.user, Namespace: namespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: b.role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: b.user}},
		}
		if err := admin.Create(ctx, rb); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Delete(ctx, rb) })
	}
	may := func(user, verb, resource, subresource, ns string) bool {
		t.Helper()
		st, err := reviewAccess(ctx, admin, user, []string{"system:authenticated"},
			access{group: "tidegate.dev", resource: resource, subresource: subresource, verb: verb, namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		return st.Allowed
	}
	// The RBAC authorizer sees new bindings through its informers, a moment after they are written:
	// wait until each user's binding is seen before asking anything of it.
	for _, u := range []struct{ user, verb string }{{"viewer", "get"}, {"editor", "patch"}} {
		waitFor(ctx, t, time.Minute, u.user+"'s binding seen by the authorizer", func() (bool, string) {
			return may(u.user, u.verb, "fleetrollouts", "", namespace), u.user + " may not " + u.verb + " fleetrollouts"
		})
	}
	for _, c := range []struct {
		user, verb, resource, subresource string
		want                              bool
	}{
		{"viewer", "get", "fleetrollouts", "", true},
		{"viewer", "list", "fleetclusters", "", true},
		{"viewer", "watch", "gatereceipts", "", true},
		{"viewer", "get", "rolloutledgers", "", true},
		{"editor", "update", "rolloutledgers", "", false},
		{"viewer", "get", "fleetrollouts", "status", true},
		{"viewer", "patch", "fleetrollouts", "", false},
		{"viewer", "create", "fleetclusters", "", false},
		{"editor", "get", "gatereceipts", "", true},
		{"editor", "patch", "fleetrollouts", "", true},
		{"editor", "create", "fleetrollouts", "", true},
		{"editor", "delete", "fleetclusters", "", true},
		{"editor", "delete", "gatereceipts", "", false},
		{"editor", "create", "gatereceipts", "", false},
		{"editor", "patch", "fleetrollouts", "status", false},
	} {
		if got := may(c.user, c.verb, c.resource, c.subresource, namespace); got != c.want {
			t.Errorf("%s (bound to %s in %s) may %s %s/%s: %v, want %v", c.user, map[string]string{"viewer": "view", "editor": "edit"}[c.user], namespace, c.verb, c.resource, c.subresource, got, c.want)
		}
		// The binding is the namespace's: nothing elsewhere.
		if c.want && may(c.user, c.verb, c.resource, c.subresource, "elsewhere") {
			t.Errorf("%s may %s %s in another namespace", c.user, c.verb, c.resource)
		}
	}
}
