package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/internal/ops"
)

// version reports the client, the CRDs as the hub serves them and the controller Deployments; when
// the hub cannot be asked it still says the client's version, and exits 2 with the reason.
func TestVersion(t *testing.T) {
	ctx := hub(t)
	r := tidegate(ctx, "version")
	if r.code != exitOK || !strings.HasPrefix(r.stdout, "client: tidegate ") ||
		!strings.Contains(r.stdout, "crd: fleetrollouts.tidegate.dev serves v1alpha1, stores v1alpha1\n") ||
		!strings.Contains(r.stdout, "crd: gatereceipts.tidegate.dev serves v1alpha1, stores v1alpha1\n") ||
		!strings.Contains(r.stdout, "controller: no tidegate controller Deployment on the hub") {
		t.Errorf("version without a controller: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	if err := namespace(ctx, "tidegate-system"); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app.kubernetes.io/name": "tidegate", "app.kubernetes.io/component": "controller"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "tidegate-controller", Namespace: "tidegate-system", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: "tidegate-controller:v0.3.0"}}},
			},
		},
	}
	if err := k8s.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), dep) })
	r = tidegate(ctx, "version", "-o", "json")
	var v versionView
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != exitOK {
		t.Fatalf("version -o json: exit %d, %v: %s%s", r.code, err, r.stdout, r.stderr)
	}
	if len(v.Controllers) != 1 || v.Controllers[0].Name != "tidegate-controller" || v.Controllers[0].Images[0] != "tidegate-controller:v0.3.0" ||
		v.Controllers[0].Replicas != 1 || v.Controllers[0].Ready != 0 || len(v.CRDs) != 4 || !v.CRDs[1].Installed || !v.CRDs[3].Installed {
		t.Errorf("version -o json: %+v", v)
	}

	r = tidegate(ctx, "--context", "nobody", "version")
	if r.code != exitUsage || !strings.HasPrefix(r.stdout, "client: tidegate ") || !strings.Contains(r.stderr, "forbidden") {
		t.Errorf("version as a user who may read nothing: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = tidegate(ctx, "--context", "nobody", "version", "-o", "json")
	v = versionView{}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || v.Error == nil || v.Error.Code != ops.CodeForbidden || v.Client.Version == "" {
		t.Errorf("version -o json as nobody: %v: %s", err, r.stdout)
	}
}

// Asked for -o json, a command that fails prints {"error": {code, message}} on stdout as well as
// the message on stderr, with the exit code unchanged.
func TestErrorsAsJSON(t *testing.T) {
	ctx := hub(t)
	for _, tc := range []struct {
		args []string
		exit int
		code ops.Code
	}{
		{[]string{"status", "nope", "-o", "json"}, exitUsage, ops.CodeNotFound},
		{[]string{"--context", "nobody", "get", "rollouts", "-o", "json"}, exitUsage, ops.CodeForbidden},
		{[]string{"-n", writesNS, "hold", "nope", "--reason", "x", "-o", "json"}, exitUsage, ops.CodeNotFound},
		{[]string{"-n", writesNS, "hold", "nope", "-o", "json"}, exitUsage, ops.CodeInvalid},
	} {
		r := tidegate(ctx, tc.args...)
		var body struct {
			Error ops.Error `json:"error"`
		}
		err := json.Unmarshal([]byte(r.stdout), &body)
		if r.code != tc.exit || err != nil || body.Error.Code != tc.code || body.Error.Message == "" ||
			!strings.Contains(r.stderr, body.Error.Message) {
			t.Errorf("%v: exit %d, %v\nstdout %s\nstderr %s\nwant exit %d and code %s", tc.args, r.code, err, r.stdout, r.stderr, tc.exit, tc.code)
		}
	}
	// Without -o json the error stays on stderr alone.
	if r := tidegate(ctx, "status", "nope"); r.stdout != "" || r.code != exitUsage {
		t.Errorf("status nope: exit %d, stdout %q", r.code, r.stdout)
	}
}
