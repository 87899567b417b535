package faultproxy

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// Kind is what a fault does.
type Kind string

const (
	// KindLatency holds each request for Fault.Delay before it is passed on.
	KindLatency Kind = "Latency"
	// KindLate holds each request for Fault.Delay, then passes it on even when its client has
	// gone: a request already on the wire that reaches the server late, such as the write of a
	// controller that lost its lease in the meantime. The server's answers are kept (LateAnswers).
	KindLate Kind = "Late"
	// KindStatus answers each request with Fault.Code (a Kubernetes Status body) and, when
	// Fault.RetryAfter is set, a Retry-After header, without passing it on.
	KindStatus Kind = "Status"
	// KindReset resets the TCP connection (RST) a request came on. Unscoped, it resets every open
	// connection when it is set and every new one as it arrives.
	KindReset Kind = "Reset"
	// KindBlackhole never answers: a request is held until the client gives up or the fault is
	// cleared (then it is passed on, late, as after a healed partition). Unscoped, it stalls whole
	// connections both ways: TLS handshakes, HTTP/2 pings and the bytes of a running watch too.
	KindBlackhole Kind = "Blackhole"
)

// A Matcher selects the requests a fault applies to.
type Matcher func(*http.Request) bool

// Fault is one fault a proxy injects. Build one with Latency, TooManyRequests, ServerError,
// Conflict, ResetConnections or Blackhole, and scope it with Only and Every.
type Fault struct {
	Kind Kind
	// Delay is how long KindLatency holds each request.
	Delay time.Duration
	// Code is the HTTP status KindStatus answers with (429, 500, 503, …).
	Code int
	// RetryAfter, when positive, is sent as Retry-After (whole seconds, rounded up) with a
	// KindStatus answer: client-go waits that long and retries.
	RetryAfter time.Duration
	// Match, when set, limits the fault to the requests it selects. A KindReset or KindBlackhole
	// fault without Match (and Every ≤ 1) acts on connections, not requests.
	Match Matcher
	// Every, when above 1, applies the fault to the first matching request and to one in every
	// Every after it; the others pass.
	Every int
}

// Latency holds every request for d before passing it on.
func Latency(d time.Duration) Fault { return Fault{Kind: KindLatency, Delay: d} }

// Late holds every request for d, then passes it on whether or not its client still waits.
func Late(d time.Duration) Fault { return Fault{Kind: KindLate, Delay: d} }

// TooManyRequests answers every request 429 with Retry-After: retryAfter (none when 0).
func TooManyRequests(retryAfter time.Duration) Fault {
	return Fault{Kind: KindStatus, Code: http.StatusTooManyRequests, RetryAfter: retryAfter}
}

// ServerError answers every request with code (500, 502, 503, 504) and no Retry-After.
func ServerError(code int) Fault { return Fault{Kind: KindStatus, Code: code} }

// Conflict answers every request 409 Conflict, as the API server answers a write made over an
// object that changed since it was read.
func Conflict() Fault { return Fault{Kind: KindStatus, Code: http.StatusConflict} }

// ResetConnections resets every connection to the proxy, open or new.
func ResetConnections() Fault { return Fault{Kind: KindReset} }

// Blackhole accepts connections and never answers on them.
func Blackhole() Fault { return Fault{Kind: KindBlackhole} }

// Only returns f limited to the requests every one of ms selects.
func (f Fault) Only(ms ...Matcher) Fault {
	if f.Match != nil {
		ms = append([]Matcher{f.Match}, ms...)
	}
	f.Match = func(r *http.Request) bool {
		for _, m := range ms {
			if !m(r) {
				return false
			}
		}
		return true
	}
	return f
}

// OneIn returns f applied to one matching request in n (the first, the n+1st, …).
func (f Fault) OneIn(n int) Fault { f.Every = n; return f }

// onConnections reports whether f acts on whole connections rather than on requests.
func (f Fault) onConnections() bool {
	return f.Match == nil && f.Every <= 1 && (f.Kind == KindReset || f.Kind == KindBlackhole)
}

// Method selects requests with one of the HTTP methods (GET, PATCH, …).
func Method(methods ...string) Matcher {
	return func(r *http.Request) bool { return slices.Contains(methods, r.Method) }
}

// PathPrefix selects requests whose URL path starts with prefix, such as
// "/apis/tidegate.dev/v1alpha1/namespaces/fleet/fleetrollouts".
func PathPrefix(prefix string) Matcher {
	return func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, prefix) }
}

// Resource selects requests for a resource by its plural name ("fleetrollouts", "deployments"), in
// any group, version and namespace, its subresources included.
func Resource(plural string) Matcher {
	return func(r *http.Request) bool { return resourceOf(r.URL.Path) == plural }
}

// DryRun selects server-side dry-run requests (?dryRun=All).
func DryRun() Matcher {
	return func(r *http.Request) bool { return r.URL.Query().Get("dryRun") != "" }
}

// Watch selects watch requests (?watch=true).
func Watch() Matcher {
	return func(r *http.Request) bool {
		w := r.URL.Query().Get("watch")
		return w == "true" || w == "1"
	}
}

// resourceOf returns the resource a Kubernetes API path names: "pods" for
// /api/v1/namespaces/x/pods/y, "fleetrollouts" for /apis/tidegate.dev/v1alpha1/fleetrollouts; ""
// for anything else (discovery, /healthz, /version).
func resourceOf(path string) string {
	s := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(s) >= 3 && s[0] == "api":
		s = s[2:]
	case len(s) >= 4 && s[0] == "apis":
		s = s[3:]
	default:
		return ""
	}
	if len(s) >= 3 && s[0] == "namespaces" {
		s = s[2:]
	}
	return s[0]
}
