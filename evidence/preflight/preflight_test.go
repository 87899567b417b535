package preflight

import (
	"context"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tgcue "github.com/tidegate/tidegate/cue"
)

// A package as it renders: a Namespace and, in it, a ConfigMap, a Deployment and a Service.
const webApp = `
apiVersion: v1
kind: Namespace
metadata:
  name: NS
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  namespace: NS
data:
  greeting: hello
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: NS
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: example.com/web:v1
        ports:
        - containerPort: 8080
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: NS
spec:
  selector:
    app: web
  ports:
  - port: 80
    targetPort: 8080
`

const serviceMonitor = `
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: web
  namespace: NS
spec:
  selector:
    matchLabels:
      app: web
  endpoints:
  - port: http
`

const serviceMonitorCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names:
    kind: ServiceMonitor
    listKind: ServiceMonitorList
    plural: servicemonitors
    singular: servicemonitor
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

// wantReachable fails the test unless got is the answer of the member API server with exactly the
// given missing APIs and dry-run errors.
func wantReachable(t *testing.T, got tgcue.ClusterPreflight, name string, missing, dryRun []string) {
	t.Helper()
	if got.Name != name || !got.Reachable || !strings.HasPrefix(got.ServerVersion, "v1.") {
		t.Errorf("got name %q, reachable %v, version %q; want %q, reachable, v1.*", got.Name, got.Reachable, got.ServerVersion, name)
	}
	if !reflect.DeepEqual(got.MissingAPIs, missing) {
		t.Errorf("missing APIs:\n got %q\nwant %q", got.MissingAPIs, missing)
	}
	if !reflect.DeepEqual(got.DryRunErrors, dryRun) {
		t.Errorf("dry-run errors:\n got %q\nwant %q", got.DryRunErrors, dryRun)
	}
}

func wantUnreachable(t *testing.T, got tgcue.ClusterPreflight, name string) {
	t.Helper()
	if want := (tgcue.ClusterPreflight{Name: name}); !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestAValidPackageInANamespaceItCreates(t *testing.T) {
	ctx, ns := setup(t)
	objs := objects(t, ns+"-new", webApp)
	got := Check(ctx, "member-1", adminConfig, objs, Options{})
	wantReachable(t, got, "member-1", nil, nil)
	assertAbsent(t, objs...)
}

func TestAValidPackageInAnExistingNamespace(t *testing.T) {
	ctx, ns := setup(t)
	// The Namespace exists already and is among the objects; everything in it is dry-run.
	objs := objects(t, ns, webApp)
	before := deepCopies(objs)
	got := Check(ctx, "member-1", adminConfig, objs, Options{})
	wantReachable(t, got, "member-1", nil, nil)
	assertAbsent(t, objs[1:]...)
	var deployments appsv1.DeploymentList
	if err := k8s.List(ctx, &deployments, client.InNamespace(ns)); err != nil || len(deployments.Items) != 0 {
		t.Errorf("deployments in %s after the preflight: %d, %v; want none", ns, len(deployments.Items), err)
	}
	if !reflect.DeepEqual(objs, before) {
		t.Errorf("Check modified its objects")
	}
}

func TestAKindTheClusterDoesNotServe(t *testing.T) {
	ctx, ns := setup(t)
	objs := objects(t, ns, webApp+"---\n"+serviceMonitor+`
---
apiVersion: batch/v1beta1
kind: CronJob
metadata:
  name: nightly
  namespace: NS
spec:
  schedule: "0 0 * * *"
---
apiVersion: apps/v1
kind: Widget
metadata:
  name: w
  namespace: NS
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: another
  namespace: NS
`)
	got := Check(ctx, "member-1", adminConfig, objs, Options{})
	wantReachable(t, got, "member-1",
		[]string{"apps/v1, Kind=Widget: Widget " + ns + "/w", "batch/v1beta1, Kind=CronJob: CronJob " + ns + "/nightly",
			"monitoring.coreos.com/v1, Kind=ServiceMonitor: ServiceMonitor " + ns + "/web, ServiceMonitor " + ns + "/another"}, nil)
}

func TestAKindWhoseCRDIsAmongTheObjects(t *testing.T) {
	ctx, ns := setup(t)
	objs := objects(t, ns, webApp+"---\n"+serviceMonitorCRD+"---\n"+serviceMonitor)
	got := Check(ctx, "member-1", adminConfig, objs, Options{})
	wantReachable(t, got, "member-1", nil, nil)
	assertAbsent(t, objs[1:]...)

	// A version the CRD does not serve is missing all the same.
	objs = objects(t, ns, serviceMonitorCRD+"---\n"+strings.Replace(serviceMonitor, "monitoring.coreos.com/v1", "monitoring.coreos.com/v2", 1))
	got = Check(ctx, "member-1", adminConfig, objs, Options{})
	wantReachable(t, got, "member-1", []string{"monitoring.coreos.com/v2, Kind=ServiceMonitor: ServiceMonitor " + ns + "/web"}, nil)
}

func TestObjectsTheServerRejects(t *testing.T) {
	ctx, ns := setup(t)
	objs := objects(t, ns, `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: NS
spec:
  replicas: -1
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: example.com/web:v1
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: fine
  namespace: NS
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: NS
spec:
  selector:
    app: web
  ports:
  - port: 70000
    targetPort: 8080
---
apiVersion: v1
kind: Namespace
metadata:
  name: Bad_Name
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: typo
  namespace: NS
datas:
  a: b
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: elsewhere
  namespace: NS-nowhere
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: nowhere
`)
	got := Check(ctx, "member-1", adminConfig, objs, Options{})
	wantReachable(t, got, "member-1", nil, []string{
		"Deployment " + ns + `/web: Deployment.apps "web" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0`,
		"Service " + ns + `/web: Service "web" is invalid: spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive`,
		`Namespace Bad_Name: Namespace "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
		"ConfigMap " + ns + `/typo: failed to create typed patch object (` + ns + `/typo; /v1, Kind=ConfigMap): .datas: field not declared in schema`,
		"ConfigMap " + ns + `-nowhere/elsewhere: namespaces "` + ns + `-nowhere" not found`,
		`ConfigMap /nowhere: namespace not specified: the server could not find the requested resource`,
	})
	assertAbsent(t, objs[:len(objs)-1]...)
}

func TestPostBuildVariablesAreSubstitutedBeforeTheDryRun(t *testing.T) {
	ctx, ns := setup(t)
	objs := objects(t, ns, strings.Replace(webApp, "replicas: 2", "replicas: ${replicas}", 1))
	got := Check(ctx, "member-1", adminConfig, objs, Options{})
	wantReachable(t, got, "member-1", nil, []string{
		"Deployment " + ns + `/web: failed to create typed patch object (` + ns + `/web; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string`,
	})

	substituted, err := Substitute(objs, map[string]string{"replicas": "3"})
	if err != nil {
		t.Fatal(err)
	}
	got = Check(ctx, "member-1", adminConfig, substituted, Options{})
	wantReachable(t, got, "member-1", nil, nil)
}

func TestAUserTheClusterForbids(t *testing.T) {
	ctx, ns := setup(t)
	objs := objects(t, ns, `
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  namespace: NS
`)
	got := Check(ctx, "member-1", nobodyConfig, objs, Options{})
	wantReachable(t, got, "member-1", nil, []string{
		"ConfigMap " + ns + `/web-config: configmaps "web-config" is forbidden: User "nobody" cannot patch resource "configmaps" in API group "" in the namespace "` + ns + `"`,
	})
}

func TestListsAreCapped(t *testing.T) {
	ctx, ns := setup(t)
	var docs []string
	for i := range 5 {
		docs = append(docs, "apiVersion: example.com/v1\nkind: Widget"+strconv.Itoa(i)+"\nmetadata:\n  name: w\n  namespace: NS\n")
		docs = append(docs, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c"+strconv.Itoa(i)+"\n  namespace: NS\nbad: field\n")
	}
	objs := objects(t, ns, strings.Join(docs, "---\n"))
	got := Check(ctx, "member-1", adminConfig, objs, Options{MaxErrors: 2})
	want := []string{"example.com/v1, Kind=Widget0: Widget0 " + ns + "/w", "example.com/v1, Kind=Widget1: Widget1 " + ns + "/w", "... and 3 more"}
	if !reflect.DeepEqual(got.MissingAPIs, want) {
		t.Errorf("missing APIs %q, want %q", got.MissingAPIs, want)
	}
	if len(got.DryRunErrors) != 3 || !strings.HasPrefix(got.DryRunErrors[0], "ConfigMap "+ns+"/c0: ") ||
		!strings.HasPrefix(got.DryRunErrors[1], "ConfigMap "+ns+"/c1: ") || got.DryRunErrors[2] != "... and 3 more" {
		t.Errorf("dry-run errors %q, want c0's, c1's and \"... and 3 more\"", got.DryRunErrors)
	}
}

// closedPort returns the address of a local port nobody listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// silentServer returns the address of a local port that accepts connections and never answers.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

func TestAnUnreachableCluster(t *testing.T) {
	objs := objects(t, "demo", webApp)
	t.Run("nobody listens", func(t *testing.T) {
		start := time.Now()
		got := Check(context.Background(), "gone", &rest.Config{Host: "https://" + closedPort(t)}, objs, Options{Timeout: 2 * time.Second})
		wantUnreachable(t, got, "gone")
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %s", d)
		}
	})
	t.Run("the server never answers", func(t *testing.T) {
		start := time.Now()
		got := Check(context.Background(), "silent", &rest.Config{Host: "https://" + silentServer(t)}, objs, Options{Timeout: time.Second})
		wantUnreachable(t, got, "silent")
		if d := time.Since(start); d < time.Second || d > 3*time.Second {
			t.Errorf("took %s, want the 1s timeout", d)
		}
	})
	t.Run("the context is done", func(t *testing.T) {
		if envErr != nil {
			t.Fatalf("no member API server: %v", envErr)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		got := Check(ctx, "member-1", adminConfig, objs, Options{})
		wantUnreachable(t, got, "member-1")
	})
	t.Run("credentials the server refuses", func(t *testing.T) {
		if envErr != nil {
			t.Fatalf("no member API server: %v", envErr)
		}
		cfg := rest.AnonymousClientConfig(adminConfig)
		cfg.BearerToken = "not-a-token"
		got := Check(context.Background(), "member-1", cfg, objs, Options{})
		wantUnreachable(t, got, "member-1")
	})
	t.Run("no config", func(t *testing.T) {
		wantUnreachable(t, Check(context.Background(), "none", nil, objs, Options{}), "none")
	})
}

func TestCheckAllKeepsTheOrderOfTargets(t *testing.T) {
	ctx, ns := setup(t)
	objs := objects(t, ns, webApp)
	targets := []Target{
		{Name: "member-1", Config: adminConfig},
		{Name: "member-2", Config: &rest.Config{Host: "https://" + closedPort(t)}},
		{Name: "member-3"},
		{Name: "member-4", Config: &rest.Config{Host: "https://" + silentServer(t)}},
		{Name: "member-5", Config: adminConfig},
	}
	start := time.Now()
	got := CheckAll(ctx, targets, objs, Options{Timeout: 2 * time.Second}, 2)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
	if len(got) != len(targets) {
		t.Fatalf("%d results for %d targets: %+v", len(got), len(targets), got)
	}
	wantReachable(t, got[0], "member-1", nil, nil)
	wantUnreachable(t, got[1], "member-2")
	wantUnreachable(t, got[2], "member-3")
	wantUnreachable(t, got[3], "member-4")
	wantReachable(t, got[4], "member-5", nil, nil)

	if got := CheckAll(ctx, nil, objs, Options{}, 0); len(got) != 0 {
		t.Errorf("no targets: %+v", got)
	}
}

func TestMessagesCarryNoCredentials(t *testing.T) {
	r := newRedactor(&rest.Config{BearerToken: "s3cr3t-t0ken", Password: "hunter22"})
	got := r.clean("Get \"https://admin:hunter22@10.0.0.1:6443/version\": token s3cr3t-t0ken\nrejected, Authorization: Bearer abc.def.ghi")
	want := `Get "https://10.0.0.1:6443/version": token [redacted] rejected, Authorization: Bearer [redacted]`
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	long := r.clean(strings.Repeat("é", maxMessage))
	if len(long) > maxMessage+len(" …") || !strings.HasSuffix(long, " …") || !strings.HasPrefix(long, "éé") {
		t.Errorf("a long message is not cut: %d bytes", len(long))
	}
}

func deepCopies(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopy()
	}
	return out
}

// slowWrites delays every PATCH (the dry-run apply) by delay, or until its request is cancelled
// when cancellable: a cluster that answers discovery but not the dry-run in time.
type slowWrites struct {
	next        http.RoundTripper
	delay       time.Duration
	cancellable bool
}

func (s slowWrites) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPatch {
		if !s.cancellable {
			time.Sleep(s.delay)
		} else {
			select {
			case <-time.After(s.delay):
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		}
	}
	return s.next.RoundTrip(r)
}

func TestTheTimeRunsOutDuringTheDryRun(t *testing.T) {
	ctx, ns := setup(t)
	objs := objects(t, ns, webApp)[1:]
	for _, cancellable := range []bool{true, false} {
		cfg := rest.CopyConfig(adminConfig)
		cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
			return slowWrites{next: rt, delay: 6 * time.Second, cancellable: cancellable}
		}
		start := time.Now()
		got := Check(ctx, "member-1", cfg, objs, Options{Timeout: time.Second})
		took := time.Since(start)
		t.Logf("cancellable %v, took %s: %+v", cancellable, took, got)
		if !got.Reachable || !strings.HasPrefix(got.ServerVersion, "v1.") || got.MissingAPIs != nil {
			t.Errorf("cancellable %v: %+v, want reachable with its version", cancellable, got)
		}
		if cancellable {
			// Every object is an error: an object that was not dry-run in time does not pass.
			if took > 2*time.Second || len(got.DryRunErrors) != len(objs) {
				t.Fatalf("took %s, errors %q; want within 1s one per object", took, got.DryRunErrors)
			}
			for i, e := range got.DryRunErrors {
				// The context or the HTTP client's own timeout (the same second) may fire first.
				if prefix := objs[i].GetKind() + " " + ns + "/" + objs[i].GetName() + ": "; !strings.HasPrefix(e, prefix) || !strings.Contains(e, "context deadline exceeded") {
					t.Errorf("error %q, want %q…context deadline exceeded…", e, prefix)
				}
			}
		} else {
			// A request that does not heed its context is given up on after a grace period.
			want := []string{"the preflight did not finish within 1s: context deadline exceeded"}
			if took < time.Second+grace || took > 2*time.Second+grace || !reflect.DeepEqual(got.DryRunErrors, want) {
				t.Errorf("took %s, errors %q; want within 1s and the grace of %s %q", took, got.DryRunErrors, grace, want)
			}
		}
	}
}

// A StatefulSet's volumeClaimTemplates cannot be updated: the server refuses the dry-run, unless
// the Kustomization forces (kustomize-controller then recreates the object), when the preflight
// checks that the object is acceptable as a new one instead.
func TestAnImmutableChangeAndForce(t *testing.T) {
	ctx, ns := setup(t)
	statefulSet := func(size string) string {
		return `
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: NS
spec:
  serviceName: db
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: db
        image: postgres:17
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: [ReadWriteOnce]
      resources:
        requests:
          storage: ` + size + "\n"
	}
	existing := objects(t, ns, statefulSet("1Gi"))[0]
	if err := k8s.Create(ctx, existing); err != nil {
		t.Fatal(err)
	}
	changed := objects(t, ns, statefulSet("2Gi"))
	got := Check(ctx, "member-1", adminConfig, changed, Options{})
	if len(got.DryRunErrors) != 1 || !strings.HasPrefix(got.DryRunErrors[0], "StatefulSet "+ns+"/db: ") ||
		!strings.Contains(got.DryRunErrors[0], "field is immutable") {
		t.Errorf("without force: dry-run errors %q, want the server's refusal of the update", got.DryRunErrors)
	}
	got = Check(ctx, "member-1", adminConfig, changed, Options{Force: true})
	wantReachable(t, got, "member-1", nil, nil)

	// With force, an object that would not be accepted as new either is still an error.
	broken := objects(t, ns, strings.Replace(statefulSet("2Gi"), "serviceName: db", "serviceName: db\n  replicas: -1", 1))
	got = Check(ctx, "member-1", adminConfig, broken, Options{Force: true})
	if len(got.DryRunErrors) != 1 || !strings.Contains(got.DryRunErrors[0], "a recreate (spec.force) would fail too") {
		t.Errorf("with force, an invalid object: dry-run errors %q, want the recreate's refusal", got.DryRunErrors)
	}
}
