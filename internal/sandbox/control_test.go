package sandbox

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidegate/tidegate/internal/simulator"
)

// fakeBackend records what the control endpoint asked of it.
type fakeBackend struct {
	mu        sync.Mutex
	clusters  []string
	commits   []commitRequest
	files     map[string]string // repo/path → content
	faults    map[string]simulator.Fault
	cleared   []string
	triggered []string // cluster/namespace/name of each CronJob triggered
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{clusters: []string{"member-1", "member-2"}, files: map[string]string{}, faults: map[string]simulator.Fault{}}
}

func (b *fakeBackend) Commit(_ context.Context, repo, message string, files map[string]string, remove []string) (string, string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.commits = append(b.commits, commitRequest{Repo: repo, Message: message, Files: files, Remove: remove})
	for p, c := range files {
		b.files[repo+"/"+p] = c
	}
	return "0123456789abcdef0123456789abcdef01234567", "main@sha1:0123456789abcdef0123456789abcdef01234567", nil
}

func (b *fakeBackend) ReadFile(_ context.Context, repo, path string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.files[repo+"/"+path]
	if !ok {
		return "", errors.New("no such file")
	}
	return c, nil
}

func (b *fakeBackend) Clusters() []string { return b.clusters }

func (b *fakeBackend) SetFault(cluster string, f simulator.Fault) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults[cluster] = f
}

func (b *fakeBackend) ClearFault(cluster, workload string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cleared = append(b.cleared, cluster+"/"+workload)
	delete(b.faults, cluster)
}

func (b *fakeBackend) TriggerCronJob(_ context.Context, cluster, namespace, name string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if name == "missing" {
		return "", errors.New(`cronjobs.batch "missing" not found`)
	}
	b.triggered = append(b.triggered, cluster+"/"+namespace+"/"+name)
	return name + "-manual-abcde", nil
}

// Every request without the token, or with another one, is refused before it reaches the backend.
func TestControlEndpointRequiresTheToken(t *testing.T) {
	b := newFakeBackend()
	srv := httptest.NewServer(newControlHandler("right-token", b))
	defer srv.Close()
	body := `{"repo":"podinfo","message":"m","files":{"a":"b"}}`
	for name, header := range map[string]string{
		"none":          "",
		"wrong token":   "Bearer wrong-token",
		"no scheme":     "right-token",
		"prefix":        "Bearer right-tok",
		"longer":        "Bearer right-token-and-more",
		"other scheme":  "Basic right-token",
		"case of token": "Bearer RIGHT-TOKEN",
	} {
		for _, req := range []*http.Request{
			must(http.NewRequest(http.MethodPost, srv.URL+"/v1/commits", strings.NewReader(body))),
			must(http.NewRequest(http.MethodGet, srv.URL+"/v1/files?repo=podinfo&path=a", nil)),
			must(http.NewRequest(http.MethodPost, srv.URL+"/v1/faults", strings.NewReader(`{"mode":"NeverAvailable"}`))),
			must(http.NewRequest(http.MethodDelete, srv.URL+"/v1/faults", nil)),
			must(http.NewRequest(http.MethodPost, srv.URL+"/v1/cronjobs", strings.NewReader(`{"namespace":"podinfo","name":"report"}`))),
		} {
			if header != "" {
				req.Header.Set("Authorization", header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s: %s %s answered %d, want 401", name, req.Method, req.URL.Path, resp.StatusCode)
			}
		}
	}
	if len(b.commits) != 0 || len(b.faults) != 0 || len(b.cleared) != 0 || len(b.triggered) != 0 {
		t.Errorf("a refused request reached the backend: %+v", b)
	}

	// A handler built without a token refuses everything, even an empty bearer.
	empty := httptest.NewServer(newControlHandler("", b))
	defer empty.Close()
	c := newControlClient(&Control{URL: empty.URL, Token: ""})
	if _, err := c.commit(context.Background(), repoPodinfo, "m", map[string]string{"a": "b"}); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("an endpoint without a token must refuse: %v", err)
	}
}

func must(r *http.Request, err error) *http.Request {
	if err != nil {
		panic(err)
	}
	return r
}

// With the token, the client commits, reads files, and sets and clears faults; bad requests are
// refused with a message that says what to fix.
func TestControlClientAndEndpoint(t *testing.T) {
	b := newFakeBackend()
	srv := httptest.NewServer(newControlHandler("tok", b))
	defer srv.Close()
	c := newControlClient(&Control{URL: srv.URL, Token: "tok"})
	ctx := context.Background()

	rev, err := c.commit(ctx, repoPodinfo, "podinfo v2", map[string]string{"app/kustomization.yaml": "x"})
	if err != nil || rev != "main@sha1:0123456789abcdef0123456789abcdef01234567" {
		t.Fatalf("commit: %q, %v", rev, err)
	}
	if got, err := c.readFile(ctx, repoPodinfo, "app/kustomization.yaml"); err != nil || got != "x" {
		t.Errorf("readFile: %q, %v", got, err)
	}
	if _, err := c.readFile(ctx, repoPodinfo, "nope"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("reading a missing file: %v", err)
	}
	if _, err := c.commit(ctx, "elsewhere", "m", map[string]string{"a": "b"}); err == nil || !strings.Contains(err.Error(), "unknown repository") {
		t.Errorf("a commit to an unknown repository: %v", err)
	}
	if _, err := c.commit(ctx, repoPodinfo, " ", map[string]string{"a": "b"}); err == nil {
		t.Errorf("a commit without a message should be refused")
	}

	if err := c.setFault(ctx, faultRequest{Workload: "podinfo/web", Mode: "LoseAvailability", Image: ":v3", After: "8s"}); err != nil {
		t.Fatal(err)
	}
	want := simulator.Fault{Workload: "podinfo/web", Mode: simulator.LoseAvailability, Image: ":v3", After: 8 * time.Second}
	if len(b.faults) != 2 || b.faults["member-1"] != want || b.faults["member-2"] != want {
		t.Errorf("a fault for every cluster: %+v", b.faults)
	}
	if err := c.clearFault(ctx, "member-2", "podinfo/web"); err != nil || len(b.faults) != 1 {
		t.Errorf("clearing member-2: %v, %+v", err, b.faults)
	}

	// A fault of the service's answers alone leaves availability healthy: no mode.
	if err := c.setFault(ctx, faultRequest{Cluster: "member-1", Workload: "podinfo/web", Image: ":v4", ErrorRatio: 0.3}); err != nil {
		t.Fatal(err)
	}
	if got, want := b.faults["member-1"], (simulator.Fault{Workload: "podinfo/web", Image: ":v4", ErrorRatio: 0.3}); got != want {
		t.Errorf("an error-ratio fault: %+v, want %+v", got, want)
	}
	if err := c.setFault(ctx, faultRequest{Cluster: "member-1", Workload: "web", LatencyFactor: 2}); err != nil {
		t.Fatal(err)
	}
	if got, want := b.faults["member-1"], (simulator.Fault{Workload: "web", LatencyFactor: 2}); got != want {
		t.Errorf("a latency fault: %+v, want %+v", got, want)
	}
	before := b.faults["member-1"]

	for bad, why := range map[faultRequest]string{
		{Cluster: "member-9", Mode: "NeverAvailable"}: "unknown cluster",
		{Mode: "Sometimes"}:                           "unknown fault mode",
		{Mode: "Slow", Delay: "soon"}:                 "delay",
		{Workload: "web"}:                             "needs a mode, an errorRatio or a latencyFactor",
		{ErrorRatio: 1.5}:                             "errorRatio 1.5 is not between 0 and 1",
		{Mode: "Slow", ErrorRatio: -0.1}:              "errorRatio -0.1",
		{LatencyFactor: -2}:                           "latencyFactor -2 is negative",
	} {
		if err := c.setFault(ctx, bad); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("fault %+v should be refused with %q: %v", bad, why, err)
		}
	}
	if b.faults["member-1"] != before {
		t.Errorf("a refused fault reached the backend: %+v", b.faults)
	}
	if err := c.clearFault(ctx, "member-9", ""); err == nil || !strings.Contains(err.Error(), "member-1, member-2") {
		t.Errorf("clearing an unknown cluster should name the known ones: %v", err)
	}

	// A CronJob's Job is started on every cluster, or on the one named; a request that names no
	// CronJob, or one the cluster has not, is refused with why.
	jobs, err := c.triggerCronJob(ctx, "", "podinfo", "report")
	if err != nil || len(jobs) != 2 || jobs["member-1"] != "report-manual-abcde" || jobs["member-2"] != "report-manual-abcde" {
		t.Errorf("triggering on every cluster: %v, %v", jobs, err)
	}
	if jobs, err := c.triggerCronJob(ctx, "member-2", "podinfo", "report"); err != nil || len(jobs) != 1 {
		t.Errorf("triggering on member-2: %v, %v", jobs, err)
	}
	if want := []string{"member-1/podinfo/report", "member-2/podinfo/report", "member-2/podinfo/report"}; strings.Join(b.triggered, " ") != strings.Join(want, " ") {
		t.Errorf("triggered %v, want %v", b.triggered, want)
	}
	for req, why := range map[cronJobRequest]string{
		{Namespace: "podinfo"}: "name the CronJob",
		{Name: "report"}:       "name the CronJob",
		{Cluster: "member-9", Namespace: "podinfo", Name: "x"}:       "unknown cluster",
		{Cluster: "member-1", Namespace: "podinfo", Name: "missing"}: `"missing" not found`,
	} {
		if _, err := c.triggerCronJob(ctx, req.Cluster, req.Namespace, req.Name); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("triggering %+v should be refused with %q: %v", req, why, err)
		}
	}

	// Until the sandbox is ready it has no cluster, and faults are refused rather than lost.
	b.clusters = nil
	if err := c.setFault(ctx, faultRequest{Mode: "NeverAvailable"}); err == nil || !strings.Contains(err.Error(), "starting") {
		t.Errorf("a fault before the sandbox is ready: %v", err)
	}
}

func TestControlListensOnLoopbackOnly(t *testing.T) {
	l, err := listenLoopback("the control endpoint")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().(*net.TCPAddr)
	if !addr.IP.IsLoopback() || addr.IP.String() != "127.0.0.1" {
		t.Errorf("the control endpoint listens on %s, want 127.0.0.1", addr)
	}
	a, err := newToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newToken()
	if len(a) != 64 || a == b {
		t.Errorf("tokens should be 32 random bytes in hex: %q, %q", a, b)
	}
}
