package boundedrender

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/decrypt"
	"github.com/tidegate/tidegate/internal/sopstest"
	"github.com/tidegate/tidegate/internal/worker"
)

// artifact is an artifact of files, rooted at "/".
func artifact(t *testing.T, files map[string]string) *evidence.Artifact {
	t.Helper()
	fs := filesys.MakeFsInMemory()
	for name, body := range files {
		if err := fs.WriteFile("/"+name, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	return &evidence.Artifact{FS: fs}
}

// amplifying is a package whose configMapGenerator names one 1 MiB file under keys keys: its
// artifact is 1 MiB (and compresses to a few KiB), its build a ConfigMap of keys MiB.
func amplifying(t *testing.T, keys int) *evidence.Artifact {
	t.Helper()
	var k strings.Builder
	k.WriteString("configMapGenerator:\n- name: big\n  files:\n")
	for i := range keys {
		fmt.Fprintf(&k, "  - k%d=blob.txt\n", i)
	}
	return artifact(t, map[string]string{
		"app/kustomization.yaml": k.String(),
		"app/blob.txt":           strings.Repeat("x", 1<<20),
	})
}

// A package renders in a worker to what it renders to in-process: the same objects, the same
// digest, and the same substitution; a package that does not build comes back with kustomize's
// error as it does in-process, a finding, not a failure of the worker.
func TestAWorkerRendersAsInProcess(t *testing.T) {
	art := artifact(t, map[string]string{
		"app/kustomization.yaml": "resources: [web.yaml]\nconfigMapGenerator:\n- name: settings\n  literals:\n  - \"mode=${mode:=fast}\"\n",
		"app/web.yaml":           "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 3\n  template:\n    spec:\n      containers:\n      - name: web\n        image: example.com/web:v1\n",
		"app/empty/.keep":        "",
	})
	spec := kustomizev1.KustomizationSpec{Path: "./app", TargetNamespace: "shop"}
	want, err := art.Render(spec)
	if err != nil {
		t.Fatal(err)
	}
	r := &Renderer{Budget: DefaultBudget}
	got, renderErr, err := r.Render(context.Background(), "rendering the candidate", art, spec, nil)
	if err != nil || renderErr != nil {
		t.Fatalf("rendering in a worker: %v, %v", renderErr, err)
	}
	if got.Digest() != want.Digest() || len(got.Objects) != len(want.Objects) || len(got.Objects) != 2 {
		t.Fatalf("worker build %s (%d objects), in-process %s (%d objects)", got.Digest(), len(got.Objects), want.Digest(), len(want.Objects))
	}
	for i := range want.Objects {
		if fmt.Sprint(got.Objects[i].Object) != fmt.Sprint(want.Objects[i].Object) {
			t.Errorf("object %d: worker %v, in-process %v", i, got.Objects[i].Object, want.Objects[i].Object)
		}
	}
	vars := map[string]string{"mode": "slow"}
	gs, err1 := got.Substitute(&kustomizev1.PostBuild{Substitute: vars})
	ws, err2 := want.Substitute(&kustomizev1.PostBuild{Substitute: vars})
	if err1 != nil || err2 != nil || len(gs) != 2 || fmt.Sprint(gs[1].Object) != fmt.Sprint(ws[1].Object) || !strings.Contains(fmt.Sprint(gs[1].Object), "mode:slow") {
		t.Errorf("substituted: worker %v (%v), in-process %v (%v)", gs, err1, ws, err2)
	}

	broken := artifact(t, map[string]string{"app/kustomization.yaml": "resources: [missing.yaml]\n"})
	_, wantErr := broken.Render(spec)
	_, renderErr, err = r.Render(context.Background(), "rendering the candidate", broken, spec, nil)
	if err != nil || renderErr == nil || wantErr == nil || renderErr.Error() != wantErr.Error() {
		t.Errorf("a package that does not build: %v (worker: %v), want %v", renderErr, err, wantErr)
	}
}

// A package that kustomize expands a thousandfold, and kustomize takes about 0.7 s and 80 MiB of allocations per MiB it builds (one 1 MiB file under many keys) passes the
// memory budget, the time budget or the output size of its worker: the caller gets a
// *worker.BudgetError naming the render budget, and this process never holds the build.
func TestAPackageOverBudgetEndsItsWorker(t *testing.T) {
	ctx := context.Background()
	spec := kustomizev1.KustomizationSpec{Path: "./app"}
	before := heldBytes()
	var be *worker.BudgetError

	small := &Renderer{Budget: worker.Budget{Time: time.Minute, Memory: 128 << 20}}
	_, renderErr, err := small.Render(ctx, "rendering the candidate", amplifying(t, 1000), spec, nil)
	if !errors.As(err, &be) || be.Exceeded != "memory" || renderErr != nil ||
		!strings.HasPrefix(err.Error(), "rendering the candidate exceeded the render budget of 128 MiB memory") || !strings.Contains(err.Error(), "--render-memory-budget") {
		t.Errorf("a render over the memory budget: %v (%v)", err, renderErr)
	}
	quick := &Renderer{Budget: worker.Budget{Time: 300 * time.Millisecond, Memory: 2 << 30}}
	if _, _, err := quick.Render(ctx, "rendering the candidate", amplifying(t, 1000), spec, nil); !errors.As(err, &be) || be.Exceeded != "time" {
		t.Errorf("a render over the time budget: %v", err)
	}
	// The output size, made 1 MiB here, for a build of 2 MiB.
	defer func(n int) { kind.MaxResponse = n }(kind.MaxResponse)
	kind.MaxResponse = 1 << 20
	roomy := &Renderer{Budget: worker.Budget{Time: time.Minute, Memory: 1 << 30}}
	if _, _, err := roomy.Render(ctx, "rendering the candidate", amplifying(t, 2), spec, nil); !errors.As(err, &be) || be.Exceeded != "output" ||
		!strings.Contains(err.Error(), "exceeded the render budget of 1 MiB output") {
		t.Errorf("a render whose build is over the output size: %v", err)
	}
	if grew := heldBytes() - before; grew > 64<<20 {
		t.Errorf("this process grew by %d MiB over the renders", grew>>20)
	}
}

// heldBytes is the memory this process's runtime holds.
func heldBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// A package with SOPS-encrypted content renders in a worker as in-process: the worker gets the
// decryption keys with the artifact, decrypts, and its build masks what it decrypted as the
// in-process build does; keys that do not decrypt the package come back as the same
// *evidence.DecryptionError, and commonMetadata is set over the worker's build too.
func TestAWorkerDecryptsAsInProcess(t *testing.T) {
	key, err := sopstest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	const password = "worker-password-93b1"
	secret, err := key.Secret("", "db", map[string]string{"password": password})
	if err != nil {
		t.Fatal(err)
	}
	art := artifact(t, map[string]string{"app/kustomization.yaml": "resources: [secret.yaml]\n", "app/secret.yaml": string(secret)})
	spec := kustomizev1.KustomizationSpec{Path: "./app", CommonMetadata: &kustomizev1.CommonMetadata{Labels: map[string]string{"team": "a"}},
		Decryption: &kustomizev1.Decryption{Provider: "sops", SecretRef: &meta.LocalObjectReference{Name: "sops-age"}}}
	keys := &evidence.Keys{Secret: "fleet/sops-age", Data: map[string][]byte{"k.agekey": []byte(key.Identity)}}
	want, err := decrypt.Render(art, spec, keys)
	if err != nil {
		t.Fatal(err)
	}
	r := &Renderer{Budget: DefaultBudget}
	got, renderErr, err := r.Render(context.Background(), "rendering the candidate", art, spec, keys)
	if err != nil || renderErr != nil {
		t.Fatalf("rendering in a worker: %v, %v", renderErr, err)
	}
	if got.Digest() != want.Digest() || !strings.Contains(fmt.Sprint(got.Objects[0].Object), password) {
		t.Errorf("worker build %s %v, in-process %s", got.Digest(), got.Objects[0].Object, want.Digest())
	}
	if masked := got.Mask("the password is " + password); masked != "the password is [redacted]" {
		t.Errorf("the worker's build masks %q", masked)
	}
	objs, err := got.Substitute(nil)
	if err != nil || objs[0].GetLabels()["team"] != "a" {
		t.Errorf("commonMetadata over the worker's build: %v (%v)", objs[0].GetLabels(), err)
	}

	other, err := sopstest.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	_, renderErr, err = r.Render(context.Background(), "rendering the candidate", art, spec,
		&evidence.Keys{Secret: "fleet/sops-age", Data: map[string][]byte{"k.agekey": []byte(other.Identity)}})
	var de *evidence.DecryptionError
	if err != nil || !errors.As(renderErr, &de) || !strings.Contains(renderErr.Error(), "fleet/sops-age") {
		t.Errorf("keys that do not decrypt: %v (%T), worker %v; want an *evidence.DecryptionError naming the Secret", renderErr, renderErr, err)
	}
}
