package firstrollout

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tidegate/tidegate/internal/scheme"
	"github.com/tidegate/tidegate/internal/testbin"
	"github.com/tidegate/tidegate/test/testenv"
)

// deploy runs `go run ./hack/deploy` (what `make deploy` runs) with args and returns its output and
// whether it succeeded.
func deploy(t *testing.T, env []string, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"run", "./hack/deploy"}, args...)...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if _, exit := err.(*exec.ExitError); err != nil && !exit {
		t.Fatalf("go run ./hack/deploy: %v\n%s", err, out)
	}
	return string(out), err == nil
}

// make deploy without IMG refuses before it reaches any cluster, and says what is missing: an image
// the cluster can pull, how to build one, how to get it there, and IMG=.
func TestDeployWithoutAnImageSaysWhatIsMissing(t *testing.T) {
	out, ok := deploy(t, []string{"KUBECONFIG=" + filepath.Join(t.TempDir(), "none")})
	if ok {
		t.Fatalf("deploy without an image succeeded:\n%s", out)
	}
	for _, want := range []string{"no image", "ImagePullBackOff", "make image", "crane push", "kind load", "make deploy IMG="} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "kubeconfig") {
		t.Errorf("the refusal came after reading the kubeconfig; it should come first:\n%s", out)
	}
}

// make deploy IMG=… installs config/default on a real kube-apiserver with the controller's image
// set to IMG, and a second run with another image takes the field over.
func TestDeployAppliesTheImageGiven(t *testing.T) {
	e, err := testbin.NewEnvironment("", testbin.FluxCRDs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Start(); err != nil {
		_ = e.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop() })
	user, err := e.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(user.Config(), client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range []string{"registry.example.com/platform/tidegate-controller:v1", "registry.example.com/platform/tidegate-controller@sha256:" + strings.Repeat("cd", 32)} {
		out, ok := deploy(t, nil, "-image", img, "-kubeconfig", path)
		if !ok || !strings.Contains(out, "deployment/tidegate-controller serverside-applied") {
			t.Fatalf("deploy -image %s: ok=%v\n%s", img, ok, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var d appsv1.Deployment
		err := c.Get(ctx, client.ObjectKey{Namespace: "tidegate-system", Name: "tidegate-controller"}, &d)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Spec.Template.Spec.Containers[0].Image; got != img {
			t.Errorf("the Deployment runs %s, want %s", got, img)
		}
	}
}
