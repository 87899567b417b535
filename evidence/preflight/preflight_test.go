package preflight

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/verdict"
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
func wantReachable(t *testing.T, got verdict.ClusterPreflight, name string, missing, dryRun []string) {
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

// wantUnreachable: the cluster was not reached, nothing else is filled, and the evidence says why
// (Unreachable holds why; any reason when why is empty).
func wantUnreachable(t *testing.T, got verdict.ClusterPreflight, name, why string) {
	t.Helper()
	if got.Unreachable == "" || !strings.Contains(got.Unreachable, why) {
		t.Errorf("%s: unreachable %q, want it to say %q", name, got.Unreachable, why)
	}
	got.Unreachable = ""
	if want := (verdict.ClusterPreflight{Name: name}); !reflect.DeepEqual(got, want) {
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
	templated := strings.Replace(webApp, "replicas: 2", "replicas: ${replicas}", 1)
	objs := objects(t, ns, templated)
	got := Check(ctx, "member-1", adminConfig, objs, Options{})
	wantReachable(t, got, "member-1", nil, []string{
		"Deployment " + ns + `/web: failed to create typed patch object (` + ns + `/web; apps/v1, Kind=Deployment): .spec.replicas: expected numeric (int or float), got string`,
	})

	substituted, err := substitute(t, ns, templated, map[string]string{"replicas": "3"})
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
func silentServer(t testing.TB) string {
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

// request is one HTTP request of a check, as the transport requests instruments saw it.
type request struct {
	target, method, path string
	// err is what the request ended with (nil while in flight, or when it got an answer).
	err error
	// late says the deadline of the request's context had passed when it ended, or has now while it
	// is in flight. The check's context and its HTTP client's timeout end the same second: either
	// may cut the request first, so its context may not be done yet although its time is up.
	late bool
	// deadline is its context's deadline (zero: none).
	deadline time.Time
}

func (r request) String() string {
	return fmt.Sprintf("%s %s %s (err %v, late %v)", r.target, r.method, r.path, r.err, r.late)
}

// requests instruments the transport of the configs it makes, to show what a check did: every
// request it made and how it ended, the ones still in flight, and how many targets had requests in
// flight at once.
type requests struct {
	mu       sync.Mutex
	done     []request
	inFlight map[*http.Request]string // → target
	most     int                      // targets with requests in flight at once, at most
	running  sync.WaitGroup
}

// config returns a copy of cfg, for target, whose requests rs records. hold, when set, runs before a
// request is sent, as a server that holds it would: an error ends the request without sending it.
func (rs *requests) config(target string, cfg *rest.Config, hold func(*http.Request) error) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			rs.start(target, r)
			var resp *http.Response
			var err error
			if hold != nil {
				err = hold(r)
			}
			if err == nil {
				resp, err = next.RoundTrip(r)
			}
			rs.end(target, r, err)
			return resp, err
		})
	})
	return cfg
}

// late says whether the deadline of r's context has passed.
func late(r *http.Request) bool {
	deadline, ok := r.Context().Deadline()
	return ok && !time.Now().Before(deadline)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (rs *requests) start(target string, r *http.Request) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.running.Add(1)
	if rs.inFlight == nil {
		rs.inFlight = map[*http.Request]string{}
	}
	rs.inFlight[r] = target
	targets := map[string]bool{}
	for _, t := range rs.inFlight {
		targets[t] = true
	}
	rs.most = max(rs.most, len(targets))
}

func (rs *requests) end(target string, r *http.Request, err error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	delete(rs.inFlight, r)
	deadline, _ := r.Context().Deadline()
	rs.done = append(rs.done, request{target: target, method: r.Method, path: r.URL.Path, err: err, late: late(r), deadline: deadline})
	rs.running.Done()
}

// ended returns the requests that ended, in the order they did.
func (rs *requests) ended() []request {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]request(nil), rs.done...)
}

// pending returns the requests in flight.
func (rs *requests) pending() []request {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var out []request
	for r, target := range rs.inFlight {
		out = append(out, request{target: target, method: r.Method, path: r.URL.Path, late: late(r)})
	}
	return out
}

// mostTargets is how many targets had requests in flight at once, at most.
func (rs *requests) mostTargets() int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.most
}

// patches keeps the PATCH requests (the dry-run applies) of rs.
func patches(rs []request) []request {
	var out []request
	for _, r := range rs {
		if r.method == http.MethodPatch {
			out = append(out, r)
		}
	}
	return out
}

func TestAnUnreachableCluster(t *testing.T) {
	objs := objects(t, "demo", webApp)
	t.Run("nobody listens", func(t *testing.T) {
		var rs requests
		cfg := rs.config("gone", &rest.Config{Host: "https://" + closedPort(t)}, nil)
		got := Check(context.Background(), "gone", cfg, objs, Options{Timeout: time.Minute})
		wantUnreachable(t, got, "gone", "connection refused")
		// The refusal ended the check, long before its deadline, and it did not try again.
		if ended := rs.ended(); len(ended) != 1 || !errors.Is(ended[0].err, syscall.ECONNREFUSED) || ended[0].late {
			t.Errorf("requests %v, want one, refused before its deadline", ended)
		}
	})
	t.Run("the server never answers", func(t *testing.T) {
		var rs requests
		cfg := rs.config("silent", &rest.Config{Host: "https://" + silentServer(t)}, nil)
		got := Check(context.Background(), "silent", cfg, objs, Options{Timeout: time.Second})
		wantUnreachable(t, got, "silent", "")
		// The check was cut by its deadline: the one request, for the version, ended when its context did.
		if ended := rs.ended(); len(ended) != 1 || ended[0].path != "/version" || ended[0].err == nil || !ended[0].late {
			t.Errorf("requests %v, want one for /version, failed when its deadline passed", ended)
		}
	})
	t.Run("the context is done", func(t *testing.T) {
		if envErr != nil {
			t.Fatalf("no member API server: %v", envErr)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		got := Check(ctx, "member-1", adminConfig, objs, Options{})
		wantUnreachable(t, got, "member-1", "context canceled")
	})
	t.Run("credentials the server refuses", func(t *testing.T) {
		if envErr != nil {
			t.Fatalf("no member API server: %v", envErr)
		}
		cfg := rest.AnonymousClientConfig(adminConfig)
		cfg.BearerToken = "not-a-token"
		got := Check(context.Background(), "member-1", cfg, objs, Options{})
		wantUnreachable(t, got, "member-1", "credentials")
	})
	t.Run("no config", func(t *testing.T) {
		wantUnreachable(t, Check(context.Background(), "none", nil, objs, Options{}), "none", "no client for the cluster")
	})
}

func TestCheckAllKeepsTheOrderOfTargets(t *testing.T) {
	ctx, ns := setup(t)
	objs := objects(t, ns, webApp)
	var rs requests
	targets := []Target{
		{Name: "member-1", Config: rs.config("member-1", adminConfig, nil)},
		{Name: "member-2", Config: rs.config("member-2", &rest.Config{Host: "https://" + closedPort(t)}, nil)},
		{Name: "member-3", Err: errors.New("fleetcluster fleet/member-3 is gone")},
		{Name: "member-4", Config: rs.config("member-4", &rest.Config{Host: "https://" + silentServer(t)}, nil)},
		{Name: "member-5", Config: rs.config("member-5", adminConfig, nil)},
	}
	got := CheckAll(ctx, targets, objs, Options{Timeout: 2 * time.Second}, 2)
	// Two checks at a time, never more: member-5's runs while member-4's waits for its deadline.
	if n := rs.mostTargets(); n != 2 {
		t.Errorf("%d targets had requests in flight at once at most, want 2 (parallel 2); requests %v", n, rs.ended())
	}
	if len(got) != len(targets) {
		t.Fatalf("%d results for %d targets: %+v", len(got), len(targets), got)
	}
	wantReachable(t, got[0], "member-1", nil, nil)
	wantUnreachable(t, got[1], "member-2", "connection refused")
	wantUnreachable(t, got[2], "member-3", "fleetcluster fleet/member-3 is gone")
	wantUnreachable(t, got[3], "member-4", "")
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

// A cluster that answers discovery but not the dry-run in time.
func TestTheTimeRunsOutDuringTheDryRun(t *testing.T) {
	ctx, ns := setup(t)
	objs := objects(t, ns, webApp)[1:]
	wantReachableOnly := func(t *testing.T, got verdict.ClusterPreflight) {
		t.Helper()
		if !got.Reachable || !strings.HasPrefix(got.ServerVersion, "v1.") || got.MissingAPIs != nil {
			t.Errorf("%+v, want reachable with its version", got)
		}
	}

	t.Run("requests that heed their context", func(t *testing.T) {
		var rs requests
		cfg := rs.config("member-1", adminConfig, func(r *http.Request) error {
			if r.Method != http.MethodPatch {
				return nil
			}
			<-r.Context().Done()
			return r.Context().Err()
		})
		got := Check(ctx, "member-1", cfg, objs, Options{Timeout: time.Second})
		wantReachableOnly(t, got)
		// The dry-runs in flight were cut by the deadline ...
		dryRuns := patches(rs.ended())
		if len(dryRuns) == 0 || len(dryRuns) > len(objs) {
			t.Errorf("%d dry-run requests, want 1 to %d: %v", len(dryRuns), len(objs), rs.ended())
		}
		for _, r := range dryRuns {
			if r.err == nil || !r.late {
				t.Errorf("dry-run %v, want it failed when its deadline passed", r)
			}
		}
		// ... and every object is an error: an object that was not dry-run in time does not pass.
		if len(got.DryRunErrors) != len(objs) {
			t.Fatalf("errors %q, want one per object", got.DryRunErrors)
		}
		for i, e := range got.DryRunErrors {
			// The context or the HTTP client's own timeout (the same second) may fire first.
			if prefix := objs[i].GetKind() + " " + ns + "/" + objs[i].GetName() + ": "; !strings.HasPrefix(e, prefix) || !strings.Contains(e, "context deadline exceeded") {
				t.Errorf("error %q, want %q…context deadline exceeded…", e, prefix)
			}
		}
	})

	t.Run("requests that do not", func(t *testing.T) {
		var rs requests
		release := make(chan struct{})
		cfg := rs.config("member-1", adminConfig, func(r *http.Request) error {
			if r.Method == http.MethodPatch {
				select {
				case <-release:
				case <-time.After(time.Minute): // should Check wait for them, it gets an answer, and the test fails
				}
			}
			return nil
		})
		t.Cleanup(func() { close(release); rs.running.Wait() })
		got := Check(ctx, "member-1", cfg, objs, Options{Timeout: time.Second})
		wantReachableOnly(t, got)
		// Check gave up on them: they are still in flight, past their deadline.
		want := []string{"the preflight did not finish within 1s: context deadline exceeded"}
		if !reflect.DeepEqual(got.DryRunErrors, want) {
			t.Errorf("errors %q, want %q", got.DryRunErrors, want)
		}
		dryRuns := patches(rs.pending())
		if len(dryRuns) == 0 {
			t.Errorf("no dry-run in flight when Check returned; requests %v", rs.ended())
		}
		for _, r := range dryRuns {
			if !r.late {
				t.Errorf("dry-run %v in flight, want its deadline passed", r)
			}
		}
	})
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
