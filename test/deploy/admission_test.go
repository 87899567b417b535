package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/test/testenv"
)

// The policies of config/admission, and what they say when they refuse.
const (
	recordsPolicy    = "tidegate-records-by-controller"
	approvalsPolicy  = "tidegate-approvals-name-their-writer"
	recordsRefused   = "are written by the tidegate controller only"
	approvalsRefused = "spec.approvals: a new approval's authenticatedAs must be the user who writes it"
)

// The ValidatingAdmissionPolicies config/default installs, enforced by a real kube-apiserver: a
// user whose RBAC lets it write receipts and ledgers is refused, the controller's ServiceAccount is
// not; a cluster admin and Kubernetes' own cleanup may delete them.
func TestDeployAdmissionOnlyTheControllerWritesRecords(t *testing.T) {
	mustBeInstalled(t)
	ctx := hub(t, 2*time.Minute)
	ns := admissionNamespace(ctx, t)
	alice := impersonating(t, "alice", "system:authenticated")
	controller := impersonating(t, saUser, saGroups...)
	waitForPolicies(ctx, t, ns, alice)

	for _, newRecord := range []func(string) client.Object{
		func(name string) client.Object { return receipt(t, ns, name) },
		func(name string) client.Object { return ledger(t, ns, name) },
	} {
		forged := newRecord("forged")
		kind := fmt.Sprintf("%T", forged)
		if err := alice.Create(ctx, forged); !refused(err, recordsRefused) {
			t.Errorf("alice creating a %s: got %v, want it refused saying %q", kind, err, recordsRefused)
		}
		own := newRecord("by-the-controller")
		if err := controller.Create(ctx, own); err != nil {
			t.Fatalf("the controller's ServiceAccount creating a %s: %v", kind, err)
		}
		own.SetLabels(map[string]string{"edited": "by-alice"})
		if err := alice.Update(ctx, own); !refused(err, recordsRefused) {
			t.Errorf("alice changing the controller's %s: got %v, want it refused", kind, err)
		}
		if err := alice.Delete(ctx, own); !refused(err, recordsRefused) {
			t.Errorf("alice deleting the controller's %s: got %v, want it refused", kind, err)
		}
	}
	// The controller prunes its receipts.
	pruned := receipt(t, ns, "pruned")
	if err := controller.Create(ctx, pruned); err != nil {
		t.Fatal(err)
	}
	if err := controller.Delete(ctx, pruned); err != nil {
		t.Errorf("the controller's ServiceAccount deleting its receipt: %v", err)
	}

	// Kubernetes' garbage collector and a cluster admin may delete what the controller wrote.
	gc := impersonating(t, "system:serviceaccount:kube-system:generic-garbage-collector", "system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated")
	for name, deleter := range map[string]client.Client{"the garbage collector": gc, "a cluster admin": admin} {
		rc := receipt(t, ns, "deleted-by-"+strings.ReplaceAll(name, " ", "-"))
		if err := controller.Create(ctx, rc); err != nil {
			t.Fatal(err)
		}
		if err := deleter.Delete(ctx, rc); err != nil {
			t.Errorf("%s deleting a receipt: %v", name, err)
		}
	}
}

// A new approval names the user who writes it; approvals already there stay as they are, whoever
// edits the rest of the spec, and the controller's status writes are not looked at.
func TestDeployAdmissionApprovalsNameTheirWriter(t *testing.T) {
	mustBeInstalled(t)
	ctx := hub(t, 2*time.Minute)
	ns := admissionNamespace(ctx, t)
	alice := impersonating(t, "alice", "system:authenticated")
	bob := impersonating(t, "bob", "system:authenticated")
	controller := impersonating(t, saUser, saGroups...)
	waitForPolicies(ctx, t, ns, alice)

	const rev = "main@sha1:1111111111111111111111111111111111111111"
	forged := rolloutWith(ns, "forged", v1alpha1.Approval{Revision: rev, By: "bob", AuthenticatedAs: "bob"})
	err := alice.Create(ctx, forged)
	if !refused(err, approvalsRefused) || !strings.Contains(err.Error(), "tidegate approve") {
		t.Errorf("alice creating a rollout with an approval authenticated as bob: got %v, want it refused saying %q and naming tidegate approve", err, approvalsRefused)
	}
	if err := alice.Create(ctx, rolloutWith(ns, "unnamed", v1alpha1.Approval{Revision: rev})); !refused(err, approvalsRefused) {
		t.Errorf("alice creating a rollout with an approval that names no one: got %v, want it refused", err)
	}

	fr := rolloutWith(ns, "web", v1alpha1.Approval{Revision: rev, By: "alice", AuthenticatedAs: "alice"})
	if err := alice.Create(ctx, fr); err != nil {
		t.Fatalf("alice creating a rollout with her own approval: %v", err)
	}
	// Bob edits something else: alice's approval stays, in his write too.
	fr.Spec.Hold = &v1alpha1.Hold{Reason: "bob looks at it"}
	if err := bob.Update(ctx, fr); err != nil {
		t.Fatalf("bob editing the rollout's hold, alice's approval unchanged: %v", err)
	}
	// Bob may not add an approval in alice's name, nor change hers.
	fr.Spec.Approvals = append(fr.Spec.Approvals, v1alpha1.Approval{Revision: rev, Wave: "all", AuthenticatedAs: "alice"})
	if err := bob.Update(ctx, fr); !refused(err, approvalsRefused) {
		t.Errorf("bob adding an approval authenticated as alice: got %v, want it refused", err)
	}
	fr.Spec.Approvals = []v1alpha1.Approval{{Revision: rev, By: "alice", AuthenticatedAs: "alice", Irreversible: true}}
	if err := bob.Update(ctx, fr); !refused(err, approvalsRefused) {
		t.Errorf("bob changing alice's approval: got %v, want it refused", err)
	}
	fr.Spec.Approvals = []v1alpha1.Approval{{Revision: rev, By: "alice", AuthenticatedAs: "alice"}, {Revision: rev, Wave: "all", By: "bob", AuthenticatedAs: "bob"}}
	if err := bob.Update(ctx, fr); err != nil {
		t.Errorf("bob adding his own approval: %v", err)
	}

	// The controller patches status and metadata, and may drop approvals (as its RBAC lets it).
	base := fr.DeepCopy()
	fr.Status.ObservedGeneration = fr.Generation
	if err := controller.Status().Patch(ctx, fr, client.MergeFrom(base)); err != nil {
		t.Errorf("the controller's ServiceAccount writing status: %v", err)
	}
	base = fr.DeepCopy()
	fr.Finalizers = append(fr.Finalizers, v1alpha1.GroupVersion.Group+"/admission-test")
	fr.Spec.Approvals = fr.Spec.Approvals[1:]
	if err := controller.Patch(ctx, fr, client.MergeFrom(base)); err != nil {
		t.Errorf("the controller's ServiceAccount adding a finalizer and dropping an approval: %v", err)
	}
}

// admissionNamespace makes a namespace of its own for a test, where alice and bob may write
// tidegate's kinds as far as RBAC goes (as a namespace's editors may): what refuses them is the
// policies alone.
func admissionNamespace(ctx context.Context, t *testing.T) string {
	t.Helper()
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-"}}
	if err := admin.Create(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	ns := nsObj.Name
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "writers", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group},
			Resources: []string{"gatereceipts", "rolloutledgers", "fleetrollouts"},
			Verbs:     []string{"get", "list", "create", "update", "patch", "delete"}}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "writers", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	return ns
}

// impersonating is a client of the hub that acts as user in groups (the admin may impersonate).
func impersonating(t *testing.T, user string, groups ...string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(adminConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	c, err := client.New(cfg, client.Options{Scheme: admin.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitForPolicies waits until the API server enforces both policies: it loads them from its
// informers a moment after they are created, and until then admits anything. The probes are
// dry-runs of what each policy refuses.
func waitForPolicies(ctx context.Context, t *testing.T, ns string, c client.Client) {
	t.Helper()
	waitFor(ctx, t, time.Minute, "the admission policies to be enforced", func() (bool, string) {
		errRecord := c.Create(ctx, receipt(t, ns, "probe"), client.DryRunAll)
		errApproval := c.Create(ctx, rolloutWith(ns, "probe", v1alpha1.Approval{Revision: "probe", AuthenticatedAs: "someone-else"}), client.DryRunAll)
		return refused(errRecord, recordsRefused) && refused(errApproval, approvalsRefused),
			fmt.Sprintf("a receipt by a user: %v; a forged approval: %v", errRecord, errApproval)
	})
}

// refused tells whether err is the API server's refusal with a message containing want.
func refused(err error, want string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), want)
}

func receipt(t *testing.T, ns, name string) *v1alpha1.GateReceipt {
	t.Helper()
	rc, _, err := v1alpha1.NewGateReceipt(ns, v1alpha1.GateReceiptSpec{
		Gate: v1alpha1.GateDeploySafe, Rollout: "web", Result: v1alpha1.ResultPass,
		Candidate:   v1alpha1.RevisionStatus{Revision: "main@sha1:1111111111111111111111111111111111111111"},
		EvaluatedAt: metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc.Name = name
	return rc
}

// ledger is a RolloutLedger with one entry (the ledger's rules compare entries on every update).
func ledger(t *testing.T, ns, name string) *v1alpha1.RolloutLedger {
	t.Helper()
	l := &v1alpha1.RolloutLedger{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.RolloutLedgerSpec{Rollout: "web",
			Candidate: v1alpha1.RevisionStatus{Revision: "main@sha1:1111111111111111111111111111111111111111", Digest: "sha256:1"}},
	}
	e := v1alpha1.LedgerEntry{Type: v1alpha1.LedgerEntryApproval, Approval: &v1alpha1.Approval{Revision: l.Spec.Candidate.Revision}}
	if err := attest.Append(l, e, metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)), nil); err != nil {
		t.Fatal(err)
	}
	return l
}

func rolloutWith(ns, name string, approvals ...v1alpha1.Approval) *v1alpha1.FleetRollout {
	return &v1alpha1.FleetRollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.FleetRolloutSpec{
			SourceRef: v1alpha1.SourceReference{Kind: "GitRepository", Name: "app"},
			Path:      "./deploy",
			Waves:     []v1alpha1.Wave{{Name: "all", Selector: &metav1.LabelSelector{}}},
			Approvals: approvals,
		},
	}
}

// Installed into another namespace by an overlay, the records policy still names the controller:
// it takes the controller's identity from the ClusterRoleBinding kustomize rewrites, not from a
// user name written in CEL, which kustomize would leave pointing at tidegate-system. The overlay is
// of config/default's parts but its fleet Namespace, which kustomize would rename to other-ns too.
func TestDeployAdmissionFollowsTheControllerToAnotherNamespace(t *testing.T) {
	dir := t.TempDir()
	overlay := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: other-ns\nresources:\n"
	for _, part := range []string{"crd", "controller", "admission"} {
		base, err := filepath.Rel(dir, filepath.Join(testenv.RepoRoot(), "config", part))
		if err != nil {
			t.Fatal(err)
		}
		overlay += "- " + base + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	built, err := buildDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]*unstructured.Unstructured{}
	for _, o := range built {
		objs[o.GetKind()+" "+o.GetName()] = o
	}
	policy, binding := objs["ValidatingAdmissionPolicy "+recordsPolicy], objs["ValidatingAdmissionPolicyBinding "+recordsPolicy]
	if policy == nil || binding == nil {
		t.Fatalf("the overlay builds no %s policy and binding", recordsPolicy)
	}
	if kind, _, _ := unstructured.NestedString(policy.Object, "spec", "paramKind", "kind"); kind != "ClusterRoleBinding" {
		t.Errorf("the records policy's parameter is a %q, want the controller's ClusterRoleBinding", kind)
	}
	if y, _ := policy.MarshalJSON(); strings.Contains(string(y), namespace) {
		t.Errorf("the records policy names %s, which an install elsewhere does not rewrite", namespace)
	}
	ref, _, _ := unstructured.NestedString(binding.Object, "spec", "paramRef", "name")
	crb := objs["ClusterRoleBinding "+ref]
	if crb == nil {
		t.Fatalf("the records policy's binding takes ClusterRoleBinding %q as its parameter, which the overlay does not build", ref)
	}
	var b rbacv1.ClusterRoleBinding
	fromUnstructured(t, crb, &b)
	want := rbacv1.Subject{Kind: "ServiceAccount", Name: serviceAccount, Namespace: "other-ns"}
	if len(b.Subjects) != 1 || b.Subjects[0] != want || b.RoleRef.Name != "tidegate-controller" {
		t.Errorf("ClusterRoleBinding %s binds %+v to %s, want the controller's ServiceAccount in other-ns (%+v)", ref, b.Subjects, b.RoleRef.Name, want)
	}
}
