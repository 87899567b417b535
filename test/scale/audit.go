package scale

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ControllerUser is the hub user the controller runs as: the hub's audit log records its requests
// and nobody else's, so they are counted apart from Flux's, the stand-in's and the bench's own.
const ControllerUser = "tidegate-controller"

// controllerRequest tells the controller's requests to a member apart from the others by their
// User-Agent: the controller shares the member's kubeconfig Secret (and so its user) with
// kustomize-controller. Every client the controller makes for a member (internal/member: probes,
// preflights, samples) sends "tidegate-controller". Go's default agent ("Go-http-client/…") is not
// the controller's: with real Flux, kustomize-controller sends requests with it.
func controllerRequest(userAgent string) bool {
	return strings.HasPrefix(userAgent, "tidegate")
}

// The API servers' audit policies: the hub logs the controller user's requests; members log every
// request, for the controller's to be picked by User-Agent. One event per request, at its end.
const (
	hubAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
  users: ["` + ControllerUser + `"]
- level: None
`
	memberAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*"]
- level: Metadata
`
)

// auditArgs returns the localfleet hook that gives each API server an audit log in dir.
func auditArgs(dir string) (func(name string, args *envtest.Arguments), error) {
	hub, member := filepath.Join(dir, "audit-policy-hub.yaml"), filepath.Join(dir, "audit-policy-member.yaml")
	if err := os.WriteFile(hub, []byte(hubAuditPolicy), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(member, []byte(memberAuditPolicy), 0o600); err != nil {
		return nil, err
	}
	return func(name string, args *envtest.Arguments) {
		policy := member
		if name == "hub" {
			policy = hub
		}
		args.Set("audit-policy-file", policy).
			Set("audit-log-path", auditPath(dir, name)).
			Set("audit-log-mode", "blocking")
	}, nil
}

func auditPath(dir, server string) string { return filepath.Join(dir, server+"-audit.log") }

// Request is one request an API server audited.
type Request struct {
	At time.Time
	// Verb is the Kubernetes verb (get, list, watch, create, update, patch, delete, …).
	Verb string
	// Resource is the resource, with "/subresource" when there is one; empty for a non-resource URL.
	Resource  string
	Namespace string
	Name      string
	Code      int
	DryRun    bool
	UserAgent string
	// Server is the API server that answered: "hub" or a member's name.
	Server string
}

// Write tells whether the request asked to change something (create, update, patch, delete), a
// dry-run excepted.
func (r Request) Write() bool {
	switch r.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return !r.DryRun
	}
	return false
}

// auditEvent is the part of an audit.k8s.io/v1 Event the bench reads.
type auditEvent struct {
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// auditLog reads an API server's audit log as it grows, keeping the requests keep selects.
type auditLog struct {
	path   string
	server string
	keep   func(auditEvent) bool

	mu     sync.Mutex
	offset int64
	rest   []byte
	reqs   []Request
}

// sync reads what was appended since the last call.
func (a *auditLog) sync() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	f, err := os.Open(a.path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	defer f.Close()
	if _, err := f.Seek(a.offset, io.SeekStart); err != nil {
		return err
	}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		a.offset += int64(len(line))
		if err != nil {
			// A partial last line is kept for the next call.
			a.rest = append(a.rest, line...)
			if err == io.EOF {
				return nil
			}
			return err
		}
		if len(a.rest) > 0 {
			line = append(a.rest, line...)
			a.rest = nil
		}
		var ev auditEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			return fmt.Errorf("%s: %w", a.path, err)
		}
		if a.keep(ev) {
			a.reqs = append(a.reqs, toRequest(ev, a.server))
		}
	}
}

func toRequest(ev auditEvent, server string) Request {
	r := Request{At: ev.RequestReceivedTimestamp, Verb: ev.Verb, UserAgent: ev.UserAgent, Server: server,
		DryRun: strings.Contains(ev.RequestURI, "dryRun=")}
	if ev.ObjectRef != nil {
		r.Resource, r.Namespace, r.Name = ev.ObjectRef.Resource, ev.ObjectRef.Namespace, ev.ObjectRef.Name
		if ev.ObjectRef.Subresource != "" {
			r.Resource += "/" + ev.ObjectRef.Subresource
		}
	}
	if ev.ResponseStatus != nil {
		r.Code = ev.ResponseStatus.Code
	}
	return r
}

// between returns the requests received in [from, to).
func (a *auditLog) between(from, to time.Time) []Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := sort.Search(len(a.reqs), func(i int) bool { return !a.reqs[i].At.Before(from) })
	var out []Request
	for ; i < len(a.reqs) && a.reqs[i].At.Before(to); i++ {
		out = append(out, a.reqs[i])
	}
	return out
}

// audit is every API server's log of the controller's requests.
type audit struct {
	hub     *auditLog
	members []*auditLog
}

func newAudit(dir string, members []string) *audit {
	a := &audit{hub: &auditLog{path: auditPath(dir, "hub"), server: "hub", keep: func(ev auditEvent) bool { return ev.User.Username == ControllerUser }}}
	for _, m := range members {
		a.members = append(a.members, &auditLog{path: auditPath(dir, m), server: m,
			keep: func(ev auditEvent) bool { return controllerRequest(ev.UserAgent) }})
	}
	return a
}

// sync reads every log up to now. Logs are written in the order requests end, so a request that
// started before an earlier one ended may be out of order; requests are kept sorted by start.
func (a *audit) sync() error {
	for _, l := range append([]*auditLog{a.hub}, a.members...) {
		if err := l.sync(); err != nil {
			return err
		}
		l.mu.Lock()
		sort.SliceStable(l.reqs, func(i, j int) bool { return l.reqs[i].At.Before(l.reqs[j].At) })
		l.mu.Unlock()
	}
	return nil
}

// Hub returns the controller's requests to the hub received in [from, to).
func (a *audit) Hub(from, to time.Time) []Request { return a.hub.between(from, to) }

// Members returns the controller's requests to members received in [from, to), by start time.
func (a *audit) Members(from, to time.Time) []Request {
	var out []Request
	for _, m := range a.members {
		out = append(out, m.between(from, to)...)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// Counts are requests counted by "verb resource".
type Counts map[string]int

func countRequests(reqs []Request, keep func(Request) bool) Counts {
	c := Counts{}
	for _, r := range reqs {
		if keep != nil && !keep(r) {
			continue
		}
		key := r.Verb
		if r.Resource != "" {
			key += " " + r.Resource
		}
		if r.DryRun {
			key += " (dry-run)"
		}
		c[key]++
	}
	return c
}

// Total is the number of requests counted.
func (c Counts) Total() int {
	n := 0
	for _, v := range c {
		n += v
	}
	return n
}

// ByVerb folds the counts by verb alone.
func (c Counts) ByVerb() Counts {
	out := Counts{}
	for k, v := range c {
		verb, _, _ := strings.Cut(k, " ")
		out[verb] += v
	}
	return out
}

// Keys returns the keys, the largest counts first.
func (c Counts) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if c[keys[i]] != c[keys[j]] {
			return c[keys[i]] > c[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// bursts groups requests (sorted by time) into runs whose gaps are under gap: one preflight or one
// sampling pass each.
func bursts(reqs []Request, gap time.Duration) [][]Request {
	var out [][]Request
	for i, r := range reqs {
		if i == 0 || r.At.Sub(reqs[i-1].At) >= gap {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], r)
	}
	return out
}
