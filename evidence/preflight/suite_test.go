package preflight

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/testenv"
)

// One member API server (envtest: a real kube-apiserver and etcd, no nodes, no controllers),
// started in TestMain as testenv.RunWithAPIServer starts one, but keeping its rest.Config, which
// Check takes. envErr says why it is not there; every test that needs it fails with that error, it
// never skips.
var (
	env *envtest.Environment
	// adminConfig reaches the member as a user of group system:masters, as a member kubeconfig does.
	adminConfig *rest.Config
	// nobodyConfig reaches the member as a user without any RBAC permission.
	nobodyConfig *rest.Config
	// k8s is a client of the member, to look at what a check left behind.
	k8s    client.Client
	envErr error
)

func TestMain(m *testing.M) {
	log.SetLogger(logr.Discard())
	os.Exit(testenv.RunWithEnvironment(m, func() (*envtest.Environment, error) {
		envErr = startAPIServer()
		return env, envErr
	}))
}

func startAPIServer() error {
	e, err := testbin.NewEnvironment("", 0)
	if err != nil {
		return err
	}
	cfg, err := e.Start()
	if err != nil {
		// Start may have left etcd or kube-apiserver running; stop what it started.
		_ = e.Stop()
		return fmt.Errorf("starting envtest: %w", err)
	}
	env = e
	admin, err := e.AddUser(envtest.User{Name: "fleet-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding an admin user: %w", err)
	}
	adminConfig = admin.Config()
	nobody, err := e.AddUser(envtest.User{Name: "nobody"}, nil)
	if err != nil {
		return fmt.Errorf("adding a user: %w", err)
	}
	nobodyConfig = nobody.Config()
	k8s, err = client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme})
	return err
}

// setup fails the test when the API server did not start, and returns a context bound to the test
// and a fresh namespace that exists on the member.
func setup(t *testing.T) (context.Context, string) {
	t.Helper()
	if envErr != nil {
		t.Fatalf("no member API server: %v", envErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "preflight-"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		// envtest runs no namespace controller: the namespace only turns Terminating.
		_ = k8s.Delete(context.Background(), ns)
	})
	return ctx, ns.Name
}

// objects parses a multi-document YAML stream, with NS replaced by ns, as the render decodes objects.
func objects(t testing.TB, ns, docs string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split(strings.ReplaceAll(docs, "NS", ns), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("parsing %q: %v", doc, err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			t.Fatalf("decoding %q: %v", doc, err)
		}
		objs = append(objs, o)
	}
	return objs
}

// assertAbsent fails the test when any of objs exists on the member: a preflight creates nothing.
func assertAbsent(t *testing.T, objs ...*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(o), got)
		if !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err) {
			t.Errorf("%s %s/%s after the preflight: %v, want not found", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}

// substitute renders docs (NS replaced by ns) as a package and substitutes vars into the build,
// as the collector hands a target the objects its Kustomization applies; the objects come back in
// the order of docs.
func substitute(t testing.TB, ns, docs string, vars map[string]string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	if err := fsys.WriteFile("/app/objects.yaml", []byte(strings.ReplaceAll(docs, "NS", ns))); err != nil {
		t.Fatal(err)
	}
	r, err := evidence.Render(fsys, kustomizev1.KustomizationSpec{Path: "./app"})
	if err != nil {
		t.Fatalf("rendering: %v", err)
	}
	got, err := r.Substitute(&kustomizev1.PostBuild{Substitute: vars})
	if err != nil {
		return nil, err
	}
	byRef := map[string]*unstructured.Unstructured{}
	for _, o := range got {
		byRef[o.GetKind()+"/"+o.GetName()] = o
	}
	var out []*unstructured.Unstructured
	for _, o := range objects(t, ns, docs) {
		out = append(out, byRef[o.GetKind()+"/"+o.GetName()])
	}
	return out, nil
}
