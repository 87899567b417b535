package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tidegate/tidegate/hack/lib/release"
	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/testenv"
)

// What config/default installs, as the tests expect it.
const (
	namespace      = "tidegate-system"
	serviceAccount = "tidegate-controller"
	deploymentName = "tidegate-controller"
	// saUser is the user name the controller's pods authenticate as.
	saUser = "system:serviceaccount:" + namespace + ":" + serviceAccount
	// fieldManager applies the manifests, as `kubectl apply --server-side` would.
	fieldManager = "tidegate-deploy-test"
)

// saGroups are the groups a token of the controller's ServiceAccount carries.
var saGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}

// The hub: a real kube-apiserver and etcd (envtest) with RBAC authorization (envtest's default,
// checked by the RBAC test), the PodSecurity admission plugin (on by default), and
// OwnerReferencesPermissionEnforcement, which is off by default but on in some distributions
// (OpenShift): with it, an owner reference with blockOwnerDeletion needs update on the owner's
// finalizers, so the controller's run under its ServiceAccount proves the RBAC is enough there too.
// Only Flux's CRDs are installed up front: tidegate's come from the manifests under test.
var (
	env *envtest.Environment
	// adminConfig reaches the hub as a member of system:masters.
	adminConfig *rest.Config
	// admin is a client of the hub as adminConfig; clientset the same as a typed clientset.
	admin     client.Client
	clientset kubernetes.Interface
	// warnings collects the warnings the API server sent admin's requests.
	warnings = &warningCollector{}
	envErr   error
	// adminKubeconfig is the admin user's kubeconfig, for processes run against the hub.
	adminKubeconfig []byte
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithEnvironment(m, func() (*envtest.Environment, error) {
		envErr = startAPIServer()
		return env, envErr
	}))
}

func startAPIServer() error {
	// tidegate's CRDs come from config/default, which the tests apply.
	e, err := testbin.NewEnvironment("", testbin.FluxCRDs)
	if err != nil {
		return err
	}
	e.ControlPlane.GetAPIServer().Configure().Append("enable-admission-plugins", "OwnerReferencesPermissionEnforcement")
	if _, err := e.Start(); err != nil {
		// Start may have left etcd or kube-apiserver running; stop what it started.
		_ = e.Stop()
		return fmt.Errorf("starting envtest: %w", err)
	}
	env = e
	user, err := e.AddUser(envtest.User{Name: "hub-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding an admin user: %w", err)
	}
	if adminKubeconfig, err = user.KubeConfig(); err != nil {
		return err
	}
	adminConfig = rest.CopyConfig(user.Config())
	adminConfig.WarningHandler = warnings
	adminConfig.QPS, adminConfig.Burst = 500, 1000 // client-go's default of 5/s makes the RBAC review slow
	s := scheme.New()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return err
	}
	if admin, err = client.New(adminConfig, client.Options{Scheme: s}); err != nil {
		return err
	}
	clientset, err = kubernetes.NewForConfig(adminConfig)
	return err
}

// hub fails the test when the API server did not start, and returns a context bound to the test.
func hub(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	if envErr != nil {
		t.Fatalf("no hub API server: %v", envErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// warningCollector records API server warnings (deprecations, PodSecurity "warn" violations).
type warningCollector struct {
	mu   sync.Mutex
	list []string
}

func (w *warningCollector) HandleWarningHeader(code int, agent, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// since returns the warnings received after the first n, and the count now.
func (w *warningCollector) since(n int) ([]string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.list[n:]...), len(w.list)
}

func (w *warningCollector) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.list)
}

// buildManifests builds config/default with kustomize's krusty, as `kubectl apply -k` does, and
// returns its objects in kustomize's output order (Namespace and CRDs first).
func buildManifests() ([]*unstructured.Unstructured, error) { return buildConfig("default") }

// buildConfig builds the kustomization config/<name> as buildManifests builds config/default.
func buildConfig(name string) ([]*unstructured.Unstructured, error) {
	return buildDir(filepath.Join(testenv.RepoRoot(), "config", name))
}

// buildDir builds the kustomization in dir as buildConfig builds one of config/.
func buildDir(dir string) ([]*unstructured.Unstructured, error) {
	resources, err := release.Kustomizer().Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range resources.Resources() {
		// Through JSON: r.Map() has Go ints, which unstructured objects cannot hold.
		j, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		objs = append(objs, o)
	}
	return objs, nil
}

func mustBuild(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := buildManifests()
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// find returns the object of kind and name in objs, failing the test when there is none.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("config/default has no %s %s", kind, name)
	return nil
}

// fromUnstructured converts o into a typed object.
func fromUnstructured(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatalf("decoding %s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

func describe(o *unstructured.Unstructured) string {
	if o.GetNamespace() != "" {
		return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
	}
	return fmt.Sprintf("%s %s", o.GetKind(), o.GetName())
}

// applyObj server-side applies o as admin, as `kubectl apply --server-side --force-conflicts` does.
func applyObj(ctx context.Context, o *unstructured.Unstructured, opts ...client.ApplyOption) error {
	opts = append([]client.ApplyOption{client.FieldOwner(fieldManager), client.ForceOwnership}, opts...)
	if err := admin.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), opts...); err != nil {
		return fmt.Errorf("applying %s: %w", describe(o), err)
	}
	return nil
}

// exists tells whether o exists on the hub.
func exists(ctx context.Context, o *unstructured.Unstructured) (bool, error) {
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(o.GroupVersionKind())
	err := admin.Get(ctx, client.ObjectKeyFromObject(o), got)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("reading %s: %w", describe(o), err)
}

// The installation of config/default on the hub, done once for every test that needs it: first a
// server-side dry-run of every object, which must pass and create nothing, then the apply.
var (
	installOnce sync.Once
	installErr  error
	// dryRunWarnings and applyWarnings are the API server's warnings during each phase.
	dryRunWarnings, applyWarnings []string
)

// installed installs config/default on the hub unless that was done, and returns why it failed.
func installed(t *testing.T) ([]*unstructured.Unstructured, error) {
	t.Helper()
	ctx := hub(t, 3*time.Minute)
	objs := mustBuild(t)
	installOnce.Do(func() { installErr = install(ctx, objs) })
	return objs, installErr
}

func mustBeInstalled(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := installed(t)
	if err != nil {
		t.Fatalf("config/default is not installed on the hub: %v", err)
	}
	return objs
}

func install(ctx context.Context, objs []*unstructured.Unstructured) error {
	var clusterScoped, namespaced []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetNamespace() == "" {
			clusterScoped = append(clusterScoped, o)
		} else {
			namespaced = append(namespaced, o)
		}
	}
	// (a) Dry-run. Objects in tidegate-system cannot be dry-run before the namespace exists (the
	// NamespaceLifecycle admission refuses them, dry-run or not), so the cluster-scoped objects are
	// dry-run first, the Namespace is then applied for real (as kubectl applies it first), and the
	// namespaced objects are dry-run in it.
	n := warnings.count()
	var errs []error
	dryRun := func(list []*unstructured.Unstructured) {
		for _, o := range list {
			if err := applyObj(ctx, o, client.DryRunAll); err != nil {
				errs = append(errs, fmt.Errorf("dry-run: %w", err))
				continue
			}
			if ok, err := exists(ctx, o); err != nil || ok {
				errs = append(errs, fmt.Errorf("dry-run of %s: it exists afterwards (%v)", describe(o), err))
			}
		}
	}
	dryRun(clusterScoped)
	for _, o := range clusterScoped {
		if o.GetKind() == "Namespace" {
			if err := applyObj(ctx, o); err != nil {
				return errors.Join(append(errs, err)...)
			}
		}
	}
	dryRun(namespaced)
	dryRunWarnings, n = warnings.since(n)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	// (b) The apply.
	for _, o := range objs {
		if err := applyObj(ctx, o); err != nil {
			errs = append(errs, err)
		}
	}
	applyWarnings, _ = warnings.since(n)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// The CRDs must serve before anything uses them.
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		if err := waitEstablished(ctx, admin, o.GetName()); err != nil {
			return err
		}
	}
	return nil
}

// waitEstablished waits until c's API server serves the CRD name.
func waitEstablished(ctx context.Context, c client.Client, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := c.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return false, nil
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not established: %w", name, err)
	}
	return nil
}

// joinLines formats a list for a failure message.
func joinLines(list []string) string {
	return "\n\t" + strings.Join(list, "\n\t")
}
