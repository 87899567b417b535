package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tidegate/tidegate/internal/simulator"
)

// The control endpoint lets the demo driver (another process) act on what only the background
// process holds: the clones of the demo repositories and the workload simulator's faults. It listens
// on 127.0.0.1 only and wants the token of state.json (mode 0600) in every request, so only the
// user who started the sandbox can use it.
//
//	POST   /v1/commits  {"repo", "message", "files": {path: content}, "remove": [path]} → {"sha", "revision"}
//	GET    /v1/files?repo=R&path=P                                                    → the file's content
//	POST   /v1/faults   {"cluster" ("" = every cluster), "workload", "mode", "image", "after", "delay",
//	                     "errorRatio", "latencyFactor"}
//	DELETE /v1/faults?cluster=C&workload=W                                            (C "" = every cluster)
//	POST   /v1/cronjobs {"cluster" ("" = every cluster), "namespace", "name"}          → {"jobs": {cluster: job}}
//
// The last starts a Job of a CronJob now, as `kubectl create job --from=cronjob/NAME` does: the
// simulator starts none on a CronJob's schedule (internal/simulator/cronjobs.go says why).

// controlBackend is what the endpoint acts on.
type controlBackend interface {
	// Commit commits files (path → content) to repo, removing the paths in remove, and pushes. It
	// returns the commit and the revision the package's Flux source reports for it: the commit's,
	// or, when the sandbox delivers the package as OCI artifacts, the artifact's it was pushed as.
	Commit(ctx context.Context, repo, message string, files map[string]string, remove []string) (sha, revision string, err error)
	// ReadFile returns a file of repo's branch head.
	ReadFile(ctx context.Context, repo, path string) (string, error)
	// Clusters are the member clusters' names.
	Clusters() []string
	// SetFault and ClearFault act on the workload simulator.
	SetFault(cluster string, f simulator.Fault)
	ClearFault(cluster, workload string)
	// TriggerCronJob starts a Job of the CronJob namespace/name on cluster and returns its name.
	TriggerCronJob(ctx context.Context, cluster, namespace, name string) (string, error)
}

type commitRequest struct {
	Repo    string            `json:"repo"`
	Message string            `json:"message"`
	Files   map[string]string `json:"files"`
	Remove  []string          `json:"remove,omitempty"`
}

type commitResponse struct {
	SHA      string `json:"sha"`
	Revision string `json:"revision"`
}

// faultRequest is a simulator.Fault for one cluster, or every cluster when Cluster is empty. A
// fault without a mode leaves the workload's availability alone: with errorRatio or latencyFactor
// it is a release that answers errors, or slowly, while its pods stay ready.
type faultRequest struct {
	Cluster       string  `json:"cluster"`
	Workload      string  `json:"workload"`
	Mode          string  `json:"mode,omitempty"`
	Image         string  `json:"image,omitempty"`
	After         string  `json:"after,omitempty"`
	Delay         string  `json:"delay,omitempty"`
	ErrorRatio    float64 `json:"errorRatio,omitempty"`
	LatencyFactor float64 `json:"latencyFactor,omitempty"`
}

// cronJobRequest names a CronJob whose Job to start on one cluster, or every cluster when Cluster is
// empty.
type cronJobRequest struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// cronJobResponse names the Job started on each cluster.
type cronJobResponse struct {
	Jobs map[string]string `json:"jobs"`
}

type errorResponse struct {
	Error string `json:"error"`
}

// maxControlBody bounds a request: a commit of the demo's files is a few KiB.
const maxControlBody = 4 << 20

// newToken returns a random token for the control endpoint.
func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("making a control token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// listenLoopback listens on a port of 127.0.0.1 the kernel picks, for what (the control endpoint,
// the simulator's metrics): nothing the sandbox serves is for other machines.
func listenLoopback(what string) (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for %s on 127.0.0.1: %w", what, err)
	}
	return l, nil
}

// newControlHandler serves the control endpoint over b, for requests that carry token.
func newControlHandler(token string, b controlBackend) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/commits", func(w http.ResponseWriter, r *http.Request) {
		var req commitRequest
		if !decode(w, r, &req) {
			return
		}
		if !slices.Contains(demoRepos, req.Repo) {
			fail(w, http.StatusBadRequest, fmt.Errorf("unknown repository %q: use one of %s", req.Repo, strings.Join(demoRepos, ", ")))
			return
		}
		if strings.TrimSpace(req.Message) == "" || len(req.Files)+len(req.Remove) == 0 {
			fail(w, http.StatusBadRequest, errors.New("a commit needs a message and files to write or remove"))
			return
		}
		sha, rev, err := b.Commit(r.Context(), req.Repo, req.Message, req.Files, req.Remove)
		if err != nil {
			fail(w, http.StatusInternalServerError, err)
			return
		}
		reply(w, commitResponse{SHA: sha, Revision: rev})
	})
	mux.HandleFunc("GET /v1/files", func(w http.ResponseWriter, r *http.Request) {
		repo, path := r.URL.Query().Get("repo"), r.URL.Query().Get("path")
		if !slices.Contains(demoRepos, repo) || path == "" {
			fail(w, http.StatusBadRequest, fmt.Errorf("want ?repo=<one of %s>&path=<file>", strings.Join(demoRepos, ", ")))
			return
		}
		content, err := b.ReadFile(r.Context(), repo, path)
		if err != nil {
			fail(w, http.StatusNotFound, err)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, content)
	})
	mux.HandleFunc("POST /v1/faults", func(w http.ResponseWriter, r *http.Request) {
		var req faultRequest
		if !decode(w, r, &req) {
			return
		}
		clusters, err := targetClusters(b, req.Cluster)
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		f, err := req.fault()
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		for _, c := range clusters {
			b.SetFault(c, f)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("DELETE /v1/faults", func(w http.ResponseWriter, r *http.Request) {
		clusters, err := targetClusters(b, r.URL.Query().Get("cluster"))
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		for _, c := range clusters {
			b.ClearFault(c, r.URL.Query().Get("workload"))
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/cronjobs", func(w http.ResponseWriter, r *http.Request) {
		var req cronJobRequest
		if !decode(w, r, &req) {
			return
		}
		clusters, err := targetClusters(b, req.Cluster)
		if err == nil && (req.Namespace == "" || req.Name == "") {
			err = errors.New("name the CronJob: its namespace and name")
		}
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		out := cronJobResponse{Jobs: map[string]string{}}
		for _, c := range clusters {
			job, err := b.TriggerCronJob(r.Context(), c, req.Namespace, req.Name)
			if err != nil {
				fail(w, http.StatusBadGateway, err)
				return
			}
			out.Jobs[c] = job
		}
		reply(w, out)
	})
	return requireToken(token, mux)
}

// requireToken refuses, with 401, every request whose Authorization header is not "Bearer <token>".
func requireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			fail(w, http.StatusUnauthorized, errors.New("missing or wrong token: use the one in the sandbox's state.json"))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxControlBody)
		next.ServeHTTP(w, r)
	})
}

func targetClusters(b controlBackend, cluster string) ([]string, error) {
	all := b.Clusters()
	if len(all) == 0 {
		return nil, errors.New("the sandbox is still starting: no cluster to act on yet")
	}
	if cluster == "" {
		return all, nil
	}
	if !slices.Contains(all, cluster) {
		return nil, fmt.Errorf("unknown cluster %q: the sandbox has %s", cluster, strings.Join(all, ", "))
	}
	return []string{cluster}, nil
}

// fault is the simulator.Fault the request asks for. It refuses what SetFault would panic on (the
// simulator takes a bad fault as a mistake in a test), and a fault that would change nothing.
func (r faultRequest) fault() (simulator.Fault, error) {
	f := simulator.Fault{Workload: r.Workload, Image: r.Image, ErrorRatio: r.ErrorRatio, LatencyFactor: r.LatencyFactor}
	var err error
	switch {
	case r.Mode != "":
		if f.Mode, err = simulator.ParseMode(r.Mode); err != nil {
			return simulator.Fault{}, err
		}
	case r.ErrorRatio == 0 && r.LatencyFactor == 0:
		return simulator.Fault{}, errors.New("a fault needs a mode, an errorRatio or a latencyFactor")
	}
	if r.ErrorRatio < 0 || r.ErrorRatio > 1 {
		return simulator.Fault{}, fmt.Errorf("errorRatio %v is not between 0 and 1", r.ErrorRatio)
	}
	if r.LatencyFactor < 0 {
		return simulator.Fault{}, fmt.Errorf("latencyFactor %v is negative: 0 or 1 leaves the latency as it is", r.LatencyFactor)
	}
	for _, d := range []struct {
		name, value string
		into        *time.Duration
	}{{"after", r.After, &f.After}, {"delay", r.Delay, &f.Delay}} {
		if d.value == "" {
			continue
		}
		if *d.into, err = time.ParseDuration(d.value); err != nil {
			return simulator.Fault{}, fmt.Errorf("%s: %w", d.name, err)
		}
	}
	return f, nil
}

func decode(w http.ResponseWriter, r *http.Request, into any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		fail(w, http.StatusBadRequest, fmt.Errorf("reading the request: %w", err))
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(errorResponse{Error: err.Error()})
}

// controlClient calls a sandbox's control endpoint.
type controlClient struct {
	url, token string
	http       *http.Client
}

func newControlClient(c *Control) *controlClient {
	return &controlClient{url: strings.TrimSuffix(c.URL, "/"), token: c.Token, http: &http.Client{Timeout: time.Minute}}
}

func (c *controlClient) do(ctx context.Context, method, path string, query url.Values, body, out any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := c.url + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the sandbox's control endpoint %s: %w", c.url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxControlBody))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		var e errorResponse
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("%s %s: %s", method, path, e.Error)
		}
		return nil, fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
		}
	}
	return b, nil
}

// commit commits files to repo and returns the new revision (`main@sha1:<sha>`).
func (c *controlClient) commit(ctx context.Context, repo, message string, files map[string]string, remove ...string) (string, error) {
	var out commitResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/commits", nil, commitRequest{Repo: repo, Message: message, Files: files, Remove: remove}, &out)
	if err != nil {
		return "", fmt.Errorf("committing %q to repository %s: %w", message, repo, err)
	}
	return out.Revision, nil
}

// readFile returns a file of repo's branch head.
func (c *controlClient) readFile(ctx context.Context, repo, path string) (string, error) {
	b, err := c.do(ctx, http.MethodGet, "/v1/files", url.Values{"repo": {repo}, "path": {path}}, nil, nil)
	if err != nil {
		return "", fmt.Errorf("reading %s of repository %s: %w", path, repo, err)
	}
	return string(b), nil
}

// setFault injects a simulator fault in cluster ("" for every cluster).
func (c *controlClient) setFault(ctx context.Context, f faultRequest) error {
	_, err := c.do(ctx, http.MethodPost, "/v1/faults", nil, f, nil)
	return err
}

// clearFault removes the fault set for workload in cluster ("" for every cluster).
func (c *controlClient) clearFault(ctx context.Context, cluster, workload string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/faults", url.Values{"cluster": {cluster}, "workload": {workload}}, nil, nil)
	return err
}

// triggerCronJob starts a Job of the CronJob namespace/name on cluster ("" for every cluster) and
// returns the Job started on each.
func (c *controlClient) triggerCronJob(ctx context.Context, cluster, namespace, name string) (map[string]string, error) {
	var out cronJobResponse
	_, err := c.do(ctx, http.MethodPost, "/v1/cronjobs", nil, cronJobRequest{Cluster: cluster, Namespace: namespace, Name: name}, &out)
	return out.Jobs, err
}
