package v1alpha1_test

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/testenv"
)

// The package's one API server: a real kube-apiserver and etcd (envtest) with the tidegate CRDs of
// config/crd/bases installed, so the CRDs' OpenAPI schemas, defaults and CEL rules are checked as a
// cluster checks them. It is started once in TestMain; envErr says why it is not there, and every test
// that needs it fails with that error (it never skips).
var (
	k8sClient client.Client
	envErr    error
)

func TestMain(m *testing.M) {
	if testenv.Fuzzing() {
		os.Exit(m.Run())
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	os.Exit(testenv.RunWithAPIServer(m, scheme, testbin.TidegateCRDs, func(c client.Client, err error) {
		k8sClient, envErr = c, err
	}))
}

// setup returns a client of the package's API server, a context bound to the test and a fresh
// namespace for the test's objects. It fails the test when the API server did not start.
func setup(t *testing.T) (context.Context, client.Client, string) {
	t.Helper()
	if envErr != nil {
		t.Fatalf("no API server to test admission against: %v", envErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tg-admission-"}}
	if err := k8sClient.Create(ctx, ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		// envtest runs no namespace controller: the namespace only turns Terminating, which is enough
		// to keep tests apart.
		_ = k8sClient.Delete(context.Background(), ns)
	})
	return ctx, k8sClient, ns.Name
}
