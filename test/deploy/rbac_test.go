package deploy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// fleetNS stands for any namespace FleetRollouts and FleetClusters live in.
const fleetNS = "fleet-a"

// access is one request to the hub's API. An empty namespace is a cluster-wide request: the
// manager's informers list and watch across all namespaces.
type access struct {
	group, resource, subresource, verb, namespace string
	// why says where the controllers make the request (allowed) or why they must not (denied).
	why string
}

// reviewAccess asks the API server c talks to whether user, of groups, may make the request a.
func reviewAccess(ctx context.Context, c client.Client, user string, groups []string, a access) (*authorizationv1.SubjectAccessReviewStatus, error) {
	return reviewAttributes(ctx, c, user, groups, authorizationv1.ResourceAttributes{
		Namespace: a.namespace, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource,
	})
}

// reviewAttributes asks as reviewAccess does, for any request (one object by name, say).
func reviewAttributes(ctx context.Context, c client.Client, user string, groups []string, attrs authorizationv1.ResourceAttributes) (*authorizationv1.SubjectAccessReviewStatus, error) {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: groups, ResourceAttributes: &attrs,
	}}
	if err := c.Create(ctx, sar); err != nil {
		return nil, fmt.Errorf("reviewing %+v for %s: %w", attrs, user, err)
	}
	return &sar.Status, nil
}

func (a access) String() string {
	r := a.resource
	if a.subresource != "" {
		r += "/" + a.subresource
	}
	if a.group != "" {
		r += "." + a.group
	}
	ns := a.namespace
	if ns == "" {
		ns = "<all namespaces>"
	}
	return fmt.Sprintf("%s %s in %s", a.verb, r, ns)
}

// allowed is every request the controllers make on the hub as config/default installs them: the
// audit of controllers/*.go and cmd/tidegate-controller. Member credentials are read in the fleet
// namespace config/default names (--fleet-namespaces=fleet) only; workload identity's tokens are
// workloadIdentityAllowed. Reads of FleetClusters, GateReceipts, Kustomizations, GitRepositories and
// OCIRepositories go through the manager's informer cache (list and watch, never get); the
// FleetRollout itself and kubeconfig Secrets are read from the API server (get), a Secret only when
// the resourceVersion a metadata-only informer of Secrets (list and watch) keeps has changed. Writes:
// FleetRollout and FleetCluster status by one merge patch of the status subresource per reconcile (neither
// controller changes a spec, and only the FleetRollout's finalizer is patched in its metadata),
// receipts and pinned sources by create and, when pruned, delete; Kustomizations by server-side
// apply (patch, and create when the apply creates one), a merge patch of spec.deletionPolicy and a
// delete when their rollout is deleted.
// The RBAC test asserts each is allowed, and that the roles grant nothing this table does not list.
var allowed = []access{
	{"tidegate.dev", "fleetrollouts", "", "get", fleetNS, "the engine reads its rollout uncached (APIReader) before acting on its status"},
	{"tidegate.dev", "fleetrollouts", "", "list", "", "informer: the FleetRollout controller, the source index, FleetCluster → rollouts"},
	{"tidegate.dev", "fleetrollouts", "", "watch", "", "informer"},
	{"tidegate.dev", "fleetrollouts", "", "patch", fleetNS, "finalize.go: the finalizer is added, and removed once the deletion policy was carried out (metadata.finalizers only)"},
	{"tidegate.dev", "fleetrollouts", "status", "patch", fleetNS, "finalizeStatus: the status patch of each reconcile"},
	{"tidegate.dev", "fleetrollouts", "finalizers", "update", fleetNS, "pinned sources and Kustomizations name their FleetRollout as controller with blockOwnerDeletion (OwnerReferencesPermissionEnforcement)"},
	{"tidegate.dev", "fleetclusters", "", "list", "", "informer: the FleetCluster controller, each rollout's inventory"},
	{"tidegate.dev", "fleetclusters", "", "watch", "", "informer"},
	{"tidegate.dev", "fleetclusters", "status", "patch", fleetNS, "the FleetCluster controller's status patch"},
	{"tidegate.dev", "gatereceipts", "", "get", fleetNS, "ledgerReceipt: a receipt the cache has not seen yet"},
	{"tidegate.dev", "gatereceipts", "", "list", "", "informer: pruneReceipts"},
	{"tidegate.dev", "gatereceipts", "", "watch", "", "informer"},
	{"tidegate.dev", "gatereceipts", "", "create", fleetNS, "WriteReceipt: one receipt per gate decision"},
	{"tidegate.dev", "gatereceipts", "", "delete", fleetNS, "pruneReceipts: beyond 200 receipts per rollout"},
	{"tidegate.dev", "rolloutledgers", "", "list", "", "informer: recordLedger, pruneReceipts"},
	{"tidegate.dev", "rolloutledgers", "", "watch", "", "informer"},
	{"tidegate.dev", "rolloutledgers", "", "create", fleetNS, "recordLedger: one ledger per revision"},
	{"tidegate.dev", "rolloutledgers", "", "update", fleetNS, "recordLedger: entries are appended"},
	{"kustomize.toolkit.fluxcd.io", "kustomizations", "", "get", fleetNS, "writeKustomization: before a cluster's first write, whether its name is taken by a Kustomization the rollout does not own (uncached)"},
	{"kustomize.toolkit.fluxcd.io", "kustomizations", "", "list", "", "informer (labelled tidegate.dev/rollout): Owns, the FleetCluster index"},
	{"kustomize.toolkit.fluxcd.io", "kustomizations", "", "watch", "", "informer"},
	{"kustomize.toolkit.fluxcd.io", "kustomizations", "", "patch", fleetNS, "applyKustomization: server-side apply"},
	{"kustomize.toolkit.fluxcd.io", "kustomizations", "", "create", fleetNS, "a server-side apply that creates the Kustomization"},
	{"kustomize.toolkit.fluxcd.io", "kustomizations", "", "delete", fleetNS, "finalize.go: a rollout deleted with deletionPolicy Delete deletes its Kustomizations and waits for Flux to prune"},
	{"helm.toolkit.fluxcd.io", "helmreleases", "", "get", fleetNS, "writeKustomization: a chart rollout's members are HelmReleases, written as Kustomizations are"},
	{"helm.toolkit.fluxcd.io", "helmreleases", "", "list", "", "informer (labelled tidegate.dev/rollout), when the hub serves HelmReleases"},
	{"helm.toolkit.fluxcd.io", "helmreleases", "", "watch", "", "informer"},
	{"helm.toolkit.fluxcd.io", "helmreleases", "", "patch", fleetNS, "applyKustomization: server-side apply; finalize.go: spec.suspend for deletionPolicy Orphan"},
	{"helm.toolkit.fluxcd.io", "helmreleases", "", "create", fleetNS, "a server-side apply that creates the HelmRelease"},
	{"helm.toolkit.fluxcd.io", "helmreleases", "", "delete", fleetNS, "finalize.go: a chart rollout deleted with deletionPolicy Delete deletes its HelmReleases"},
	{"source.toolkit.fluxcd.io", "gitrepositories", "", "list", "", "informer: tracked, pinned and policy sources"},
	{"source.toolkit.fluxcd.io", "gitrepositories", "", "watch", "", "informer"},
	{"source.toolkit.fluxcd.io", "gitrepositories", "", "create", fleetNS, "ensurePinnedSource"},
	{"source.toolkit.fluxcd.io", "gitrepositories", "", "delete", fleetNS, "prunePinnedSources"},
	{"source.toolkit.fluxcd.io", "ocirepositories", "", "list", "", "informer: tracked, pinned and policy sources"},
	{"source.toolkit.fluxcd.io", "ocirepositories", "", "watch", "", "informer"},
	{"source.toolkit.fluxcd.io", "ocirepositories", "", "create", fleetNS, "ensurePinnedSource"},
	{"source.toolkit.fluxcd.io", "ocirepositories", "", "delete", fleetNS, "prunePinnedSources"},
	{"source.toolkit.fluxcd.io", "helmcharts", "", "list", "", "informer: tracked and pinned chart sources"},
	{"source.toolkit.fluxcd.io", "helmcharts", "", "watch", "", "informer"},
	{"source.toolkit.fluxcd.io", "helmcharts", "", "create", fleetNS, "ensurePinnedSource"},
	{"source.toolkit.fluxcd.io", "helmcharts", "", "delete", fleetNS, "prunePinnedSources"},
	{"", "configmaps", "", "create", fleetNS, "WriteReceipt: the parts of a large receipt's evidence, owned by the receipt"},
	{"", "configmaps", "", "get", defaultFleet, "member.Clients: a workload identity ConfigMap (spec.kubeConfig.configMapRef), read uncached when its resourceVersion changed"},
	{"", "configmaps", "", "list", defaultFleet, "member.Clients: the metadata-only informer of ConfigMaps (resourceVersions), in each of --fleet-namespaces"},
	{"", "configmaps", "", "watch", defaultFleet, "member.Clients: the metadata-only informer of ConfigMaps"},
	{"", "secrets", "", "get", defaultFleet, "member.Clients: a kubeconfig Secret, read uncached (APIReader) when its resourceVersion changed"},
	{"", "secrets", "", "list", defaultFleet, "member.Clients: the metadata-only informer of Secrets (resourceVersions, never data), in each of --fleet-namespaces"},
	{"", "secrets", "", "watch", defaultFleet, "the metadata-only informer of Secrets"},
	{"", "events", "", "create", fleetNS, "events about FleetRollouts (Flux's recorder, core/v1) and FleetClusters"},
	{"", "events", "", "patch", fleetNS, "repeated events are patched (count)"},
	{"coordination.k8s.io", "leases", "", "get", namespace, "leader election"},
	{"", "secrets", "", "get", namespace, "LoadSigner: the receipt signing key (--receipt-signing-key), read once at start"},
	{"coordination.k8s.io", "leases", "", "create", namespace, "leader election"},
	{"coordination.k8s.io", "leases", "", "update", namespace, "leader election: renew and release"},
	{"", "events", "", "create", namespace, "leader election events on the Lease"},
	{"", "events", "", "patch", namespace, "leader election events on the Lease"},
}

// denied are requests the controllers must not be able to make.
var denied = []access{
	{"*", "*", "", "*", "", "no wildcard"},
	{"", "secrets", "", "create", fleetNS, "tidegate writes no Secret"},
	{"", "secrets", "", "update", fleetNS, "tidegate writes no Secret"},
	{"", "secrets", "", "patch", fleetNS, "tidegate writes no Secret"},
	{"", "secrets", "", "delete", fleetNS, "tidegate writes no Secret"},
	{"", "pods", "", "get", "kube-system", "tidegate reads no pod on the hub"},
	{"", "pods", "", "list", "", "tidegate reads no pod on the hub"},
	{"", "configmaps", "", "update", fleetNS, "evidence parts are immutable"},
	{"", "configmaps", "", "delete", fleetNS, "evidence parts go with their receipt (garbage collection)"},
	{"apps", "deployments", "", "get", fleetNS, "workloads are read on members, with their kubeconfigs"},
	{"", "namespaces", "", "create", "", "tidegate creates no namespace"},
	{"", "namespaces", "", "delete", "", "tidegate deletes no namespace"},
	{"", "serviceaccounts", "", "create", fleetNS, "tidegate makes no ServiceAccount"},
	{"", "serviceaccounts", "", "list", "", "a ServiceAccount is read by name, uncached, only for workload identity"},
	{"", "users", "", "impersonate", "", "no impersonation"},
	{"rbac.authorization.k8s.io", "clusterrolebindings", "", "create", "", "no RBAC writes"},
	{"rbac.authorization.k8s.io", "clusterroles", "", "escalate", "", "no RBAC escalation"},
	{"rbac.authorization.k8s.io", "clusterroles", "", "bind", "", "no RBAC binding"},
	{"rbac.authorization.k8s.io", "rolebindings", "", "create", fleetNS, "no RBAC writes"},
	{"apiextensions.k8s.io", "customresourcedefinitions", "", "create", "", "CRDs are installed with the manifests, not by the controller"},
	{"apiextensions.k8s.io", "customresourcedefinitions", "", "update", "", "CRDs are installed with the manifests"},
	{"apiextensions.k8s.io", "customresourcedefinitions", "", "delete", "", "CRDs are installed with the manifests"},
	{"tidegate.dev", "fleetrollouts", "", "create", fleetNS, "rollouts are the users'"},
	{"tidegate.dev", "fleetrollouts", "", "update", fleetNS, "the controller never writes a rollout's spec; its finalizer is patched"},
	{"tidegate.dev", "fleetrollouts", "", "delete", fleetNS, "rollouts are the users'"},
	{"tidegate.dev", "fleetrollouts", "status", "update", fleetNS, "status is patched, never updated"},
	{"tidegate.dev", "fleetclusters", "", "create", fleetNS, "clusters are the users'"},
	{"tidegate.dev", "fleetclusters", "", "update", fleetNS, "the controller never writes a cluster's spec or metadata"},
	{"tidegate.dev", "fleetclusters", "", "patch", fleetNS, "the controller never writes a cluster's spec or metadata"},
	{"tidegate.dev", "fleetclusters", "", "delete", fleetNS, "clusters are the users'"},
	{"tidegate.dev", "fleetclusters", "status", "update", fleetNS, "status is patched, never updated"},
	{"tidegate.dev", "gatereceipts", "", "update", fleetNS, "receipts are immutable"},
	{"tidegate.dev", "gatereceipts", "", "patch", fleetNS, "receipts are immutable"},
	{"tidegate.dev", "rolloutledgers", "", "delete", fleetNS, "ledgers outlive their rollout"},
	{"kustomize.toolkit.fluxcd.io", "kustomizations", "", "update", fleetNS, "Kustomizations are written by server-side apply only"},
	{"kustomize.toolkit.fluxcd.io", "kustomizations", "status", "patch", fleetNS, "a Kustomization's status is kustomize-controller's"},
	{"source.toolkit.fluxcd.io", "gitrepositories", "", "update", fleetNS, "pinned sources are created once, never changed"},
	{"source.toolkit.fluxcd.io", "gitrepositories", "", "patch", fleetNS, "pinned sources are created once, never changed"},
	{"source.toolkit.fluxcd.io", "gitrepositories", "status", "patch", fleetNS, "a source's status is source-controller's"},
	{"source.toolkit.fluxcd.io", "ocirepositories", "", "update", fleetNS, "pinned sources are created once, never changed"},
	{"source.toolkit.fluxcd.io", "helmcharts", "", "update", fleetNS, "pinned sources are created once, never changed"},
	{"source.toolkit.fluxcd.io", "helmrepositories", "", "list", "", "a HelmChart names its HelmRepository's kind: tidegate reads no HelmRepository"},
	{"source.toolkit.fluxcd.io", "buckets", "", "list", "", "tidegate uses no Bucket"},
	{"helm.toolkit.fluxcd.io", "helmreleases", "", "update", fleetNS, "HelmReleases are written by server-side apply only"},
	{"helm.toolkit.fluxcd.io", "helmreleases", "status", "patch", fleetNS, "a HelmRelease's status is helm-controller's"},
	{"coordination.k8s.io", "leases", "", "get", "kube-system", "the Lease lives in tidegate-system only"},
	{"coordination.k8s.io", "leases", "", "update", "kube-system", "the Lease lives in tidegate-system only"},
	{"coordination.k8s.io", "leases", "", "create", fleetNS, "the Lease lives in tidegate-system only"},
	{"coordination.k8s.io", "leases", "", "list", "", "leader election gets its Lease by name"},
	{"coordination.k8s.io", "leases", "", "delete", namespace, "leader election never deletes its Lease"},
	{"events.k8s.io", "events", "", "create", fleetNS, "events are recorded through core/v1"},
}

// TestDeployManifestsRBAC asks the hub's RBAC authorizer (SubjectAccessReviews) whether the
// controller's ServiceAccount may make each request of the audit (allowed) and none of the requests
// it must not make (denied), and checks that the roles in config/rbac grant nothing the audit does
// not list.
func TestDeployManifestsRBAC(t *testing.T) {
	objs := mustBeInstalled(t)
	ctx := hub(t, time.Minute)

	review := func(user string, groups []string, a access) (*authorizationv1.SubjectAccessReviewStatus, error) {
		return reviewAccess(ctx, admin, user, groups, a)
	}

	// The authorizer is RBAC, not AlwaysAllow: a user without bindings is denied, and the
	// controller's requests are allowed by its own bindings.
	if st, err := review("nobody", []string{"system:authenticated"}, allowed[0]); err != nil {
		t.Fatal(err)
	} else if st.Allowed {
		t.Fatalf("a user without any binding may %s: the hub does not authorize with RBAC (%s)", allowed[0], st.Reason)
	}

	for _, a := range allowed {
		st, err := review(saUser, saGroups, a)
		switch {
		case err != nil:
			t.Error(err)
		case !st.Allowed:
			t.Errorf("the controller may not %s, which it does: %s (%s)", a, a.why, st.Reason)
		case !strings.Contains(st.Reason, `"tidegate-controller"`) && !strings.Contains(st.Reason, `"tidegate-member-credentials"`):
			t.Errorf("the controller may %s, but not by its own bindings: %s", a, st.Reason)
		}
	}
	for _, a := range denied {
		st, err := review(saUser, saGroups, a)
		switch {
		case err != nil:
			t.Error(err)
		case st.Allowed:
			t.Errorf("the controller may %s, which it must not: %s (%s)", a, a.why, st.Reason)
		}
	}

	// Nothing granted beyond the audit: every verb of every rule is in allowed, cluster-wide rules
	// for a use outside tidegate-system, the namespaced Role's for a use in tidegate-system.
	covered := func(group, resource, verb string, inNamespace bool) bool {
		for _, a := range allowed {
			r := a.resource
			if a.subresource != "" {
				r += "/" + a.subresource
			}
			if a.group == group && r == resource && a.verb == verb && (a.namespace == namespace) == inNamespace {
				return true
			}
		}
		return false
	}
	for _, o := range objs {
		if o.GetName() != "tidegate-controller" && o.GetName() != memberCredentials {
			continue // the user-facing roles (TestDeployUserRolesAggregate)
		}
		for _, rule := range rulesOf(t, o) {
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					for _, v := range rule.Verbs {
						if !covered(g, res, v, o.GetKind() == "Role") {
							t.Errorf("%s grants %s %s.%s, which the audit (allowed) does not list: remove the marker in controllers/doc.go (or the rule in config/rbac/member_credentials.yaml) or add the use to the table",
								describe(o), v, res, g)
						}
					}
				}
			}
		}
	}
}
