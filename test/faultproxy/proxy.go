// Package faultproxy puts a proxy in front of a Kubernetes API server that injects the faults a test
// switches on and off while it runs: latency, 429 with Retry-After, 5xx, connection resets and black
// holes, for every request or only the ones a Matcher selects (a verb, a resource, dry-runs).
//
// The proxy terminates TLS with a serving certificate of its own (CA) and passes requests on over
// TLS to the API server. It keeps each client's identity: a client that presents a certificate
// registered with Config or KubeConfig is passed on with that same certificate, so the API server
// authenticates, authorizes and audits it as if it came directly; a client without one (a bearer
// token) is passed on with its Authorization header. With no fault set the proxy adds none: watches
// stream, HTTP/2 is spoken on both sides, and when the API server cannot be reached the client's
// connection is reset, as a direct connection would fail.
package faultproxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// Proxy is a fault-injecting proxy in front of one API server.
type Proxy struct {
	// URL is where clients reach the proxy: https://127.0.0.1:<port>.
	URL string

	caPEM   []byte
	backend *rest.Config // the API server's address and CA, no credentials
	srv     *http.Server
	rp      *httputil.ReverseProxy
	closed  chan struct{}
	closing sync.Once

	mu         sync.Mutex
	faults     []*active
	changed    chan struct{} // closed and replaced whenever faults change
	conns      map[*conn]struct{}
	transports map[[32]byte]http.RoundTripper // by the SHA-256 of a client certificate
	anonymous  http.RoundTripper

	requests atomic.Int64
	injected atomic.Int64
	late     []int // the server's answers to KindLate requests, under mu
}

type active struct {
	Fault
	seen atomic.Int64
}

// discardLog swallows the HTTP server's and reverse proxy's complaints about the connections the
// faults break on purpose.
var discardLog = log.New(io.Discard, "", 0)

type ctxKey int

const (
	connKey ctxKey = iota
	transportKey
)

// New starts a proxy on a loopback port in front of the API server backend names (its Host and CA;
// its credentials are not used). Close stops it.
func New(backend *rest.Config) (*Proxy, error) {
	if backend.Host == "" {
		return nil, errors.New("fault proxy: the API server's config has no Host")
	}
	serving, caPEM, err := servingCert()
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		caPEM:      caPEM,
		backend:    &rest.Config{Host: backend.Host, TLSClientConfig: rest.TLSClientConfig{CAData: backend.CAData, CAFile: backend.CAFile, ServerName: backend.ServerName}},
		closed:     make(chan struct{}),
		changed:    make(chan struct{}),
		conns:      map[*conn]struct{}{},
		transports: map[[32]byte]http.RoundTripper{},
	}
	if p.anonymous, err = p.transport(nil, nil); err != nil {
		return nil, err
	}
	host := backend.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	target, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("fault proxy: API server address %q: %w", backend.Host, err)
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
		},
		Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			return r.Context().Value(transportKey).(http.RoundTripper).RoundTrip(r)
		}),
		FlushInterval: -1,
		ErrorHandler:  p.backendFailed,
		ErrorLog:      discardLog,
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fault proxy: listening: %w", err)
	}
	p.URL = "https://" + l.Addr().String()
	p.srv = &http.Server{
		Handler:     p,
		TLSConfig:   &tls.Config{Certificates: []tls.Certificate{serving}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12},
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey, c) },
		ErrorLog:    discardLog,
	}
	go func() { _ = p.srv.ServeTLS(&listener{Listener: l, p: p}, "", "") }()
	return p, nil
}

// CA returns the PEM certificate clients must trust to reach the proxy.
func (p *Proxy) CA() []byte { return slices.Clone(p.caPEM) }

// Set replaces the faults in force by faults (none: Clear). A request meets the first fault that
// applies to it; unscoped resets and black holes act on connections at once.
func (p *Proxy) Set(faults ...Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = p.faults[:0:0]
	for _, f := range faults {
		p.faults = append(p.faults, &active{Fault: f})
	}
	close(p.changed)
	p.changed = make(chan struct{})
	if p.connFault(KindReset) {
		for c := range p.conns {
			c.reset()
		}
	}
}

// Clear removes every fault: requests held by a black hole go on, new ones pass.
func (p *Proxy) Clear() { p.Set() }

// Counts returns how many requests reached the proxy's handler and how many of them met a fault
// (faults on whole connections are not counted: their requests never arrive).
func (p *Proxy) Counts() (requests, injected int64) { return p.requests.Load(), p.injected.Load() }

// Close stops the proxy and closes every connection through it, held ones included.
func (p *Proxy) Close() {
	p.closing.Do(func() {
		close(p.closed)
		_ = p.srv.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for c := range p.conns {
			c.close()
		}
	})
}

// connFault reports whether an unscoped fault of kind is in force. p.mu is held.
func (p *Proxy) connFault(kind Kind) bool {
	for _, f := range p.faults {
		if f.Kind == kind && f.onConnections() {
			return true
		}
	}
	return false
}

// requestFault returns the fault r meets, if any.
func (p *Proxy) requestFault(r *http.Request) *active {
	p.mu.Lock()
	faults := p.faults
	p.mu.Unlock()
	for _, f := range faults {
		if f.onConnections() || (f.Match != nil && !f.Match(r)) {
			continue
		}
		if n := f.seen.Add(1); f.Every > 1 && (n-1)%int64(f.Every) != 0 {
			continue
		}
		return f
	}
	return nil
}

// waitWhile blocks while cond (evaluated under p.mu) holds, until done or the proxy closes. It
// returns false when it gave up.
func (p *Proxy) waitWhile(cond func() bool, done <-chan struct{}) bool {
	for {
		p.mu.Lock()
		on, changed := cond(), p.changed
		p.mu.Unlock()
		if !on {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		case <-p.closed:
			return false
		}
	}
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	rt, err := p.transportOf(r)
	if err != nil {
		writeStatus(w, http.StatusUnauthorized, 0, err.Error())
		return
	}
	if f := p.requestFault(r); f != nil {
		p.injected.Add(1)
		switch f.Kind {
		case KindLatency:
			select {
			case <-time.After(f.Delay):
			case <-r.Context().Done():
				return
			}
		case KindLate:
			p.passLate(w, r, rt, f.Delay)
			return
		case KindStatus:
			writeStatus(w, f.Code, f.RetryAfter, statusMessage(f.Code))
			return
		case KindReset:
			resetConnOf(r)
			panic(http.ErrAbortHandler)
		case KindBlackhole:
			if !p.waitWhile(func() bool { return slices.Contains(p.faults, f) }, r.Context().Done()) {
				return
			}
		}
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), transportKey, rt)))
}

// passLate passes r on after d, with its body read first and its context no longer the client's,
// so that it reaches the server even when the client has gone, and keeps the server's answer.
func (p *Proxy) passLate(w http.ResponseWriter, r *http.Request, rt http.RoundTripper, d time.Duration) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	ctx := context.WithoutCancel(r.Context())
	select {
	case <-time.After(d):
	case <-p.closed:
		return
	}
	r = r.WithContext(context.WithValue(ctx, transportKey, rt))
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	rec := &codeRecorder{ResponseWriter: w, code: http.StatusOK}
	p.rp.ServeHTTP(rec, r)
	p.mu.Lock()
	p.late = append(p.late, rec.code)
	p.mu.Unlock()
}

// LateAnswers are the HTTP status codes the server answered the requests a Late fault held with,
// in the order they were passed on.
func (p *Proxy) LateAnswers() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.late)
}

// codeRecorder keeps the status code written through it.
type codeRecorder struct {
	http.ResponseWriter
	code int
}

func (c *codeRecorder) WriteHeader(code int) {
	c.code = code
	c.ResponseWriter.WriteHeader(code)
}

func (c *codeRecorder) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// backendFailed handles a request the API server did not answer: the client's connection is reset,
// as its own connection to a server that is down or cut off would break.
func (p *Proxy) backendFailed(_ http.ResponseWriter, r *http.Request, _ error) {
	if r.Context().Err() != nil {
		return // the client went away
	}
	resetConnOf(r)
	panic(http.ErrAbortHandler)
}

func resetConnOf(r *http.Request) {
	c, _ := r.Context().Value(connKey).(net.Conn)
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if pc, ok := c.(*conn); ok {
		pc.reset()
	}
}

// transportOf returns the transport that passes r on with its client's identity.
func (p *Proxy) transportOf(r *http.Request) (http.RoundTripper, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return p.anonymous, nil
	}
	leaf := r.TLS.PeerCertificates[0]
	p.mu.Lock()
	rt, ok := p.transports[sha256.Sum256(leaf.Raw)]
	p.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("the fault proxy does not know the client certificate of %q: register it with Config or KubeConfig", leaf.Subject.CommonName)
	}
	return rt, nil
}

// register makes the proxy pass on requests that present the certificate certPEM with that same
// certificate and key.
func (p *Proxy) register(certPEM, keyPEM []byte) error {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("fault proxy: client certificate: %w", err)
	}
	rt, err := p.transport(certPEM, keyPEM)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.transports[sha256.Sum256(pair.Certificate[0])] = rt
	return nil
}

// transport returns a transport to the API server presenting the given client certificate (none
// when nil).
func (p *Proxy) transport(certPEM, keyPEM []byte) (http.RoundTripper, error) {
	cfg := rest.CopyConfig(p.backend)
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("fault proxy: TLS to %s: %w", p.backend.Host, err)
	}
	return &http.Transport{
		TLSClientConfig:     tlsConfig,
		ForceAttemptHTTP2:   true,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		IdleConnTimeout:     90 * time.Second,
		MaxIdleConnsPerHost: 25,
	}, nil
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// writeStatus answers with a Kubernetes Status, as an API server does, so clients decode it.
func writeStatus(w http.ResponseWriter, code int, retryAfter time.Duration, message string) {
	st := metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: message, Reason: reasonFor(code), Code: int32(code),
	}
	if retryAfter > 0 {
		secs := int((retryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		st.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(secs)}
	}
	b, _ := json.Marshal(st)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// statusMessage is what an API server's answer with code says: the message client-go gives the
// error of such an answer, and that the test's proxy sent it.
func statusMessage(code int) string {
	return fmt.Sprintf("%s (fault injected by the test's proxy: %d)",
		apierrors.NewGenericServerResponse(code, "", schema.GroupResource{}, "", "", 0, false).ErrStatus.Message, code)
}

func reasonFor(code int) metav1.StatusReason {
	switch code {
	case http.StatusTooManyRequests:
		return metav1.StatusReasonTooManyRequests
	case http.StatusInternalServerError:
		return metav1.StatusReasonInternalError
	case http.StatusServiceUnavailable:
		return metav1.StatusReasonServiceUnavailable
	case http.StatusGatewayTimeout:
		return metav1.StatusReasonTimeout
	case http.StatusUnauthorized:
		return metav1.StatusReasonUnauthorized
	case http.StatusConflict:
		return metav1.StatusReasonConflict
	}
	return metav1.StatusReasonUnknown
}

// listener tracks the proxy's connections and resets new ones while an unscoped reset is in force.
type listener struct {
	net.Listener
	p *Proxy
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := &conn{Conn: nc, p: l.p, done: make(chan struct{})}
		l.p.mu.Lock()
		resetting := l.p.connFault(KindReset)
		if !resetting {
			l.p.conns[c] = struct{}{}
		}
		l.p.mu.Unlock()
		if !resetting {
			return c, nil
		}
		// Read what the client sent first (its TLS hello), so that it is waiting for an answer
		// when the reset comes: it reads "connection reset by peer".
		go func() {
			_ = nc.SetReadDeadline(time.Now().Add(time.Second))
			_, _ = nc.Read(make([]byte, 512))
			c.reset()
		}()
	}
}

// conn is a client connection; while an unscoped black hole is in force nothing passes on it, either way.
type conn struct {
	net.Conn
	p        *Proxy
	done     chan struct{}
	doneOnce sync.Once
}

func (c *conn) stall() {
	c.p.waitWhile(func() bool { return c.p.connFault(KindBlackhole) }, c.done)
}

func (c *conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.stall() // what arrived while the hole is open is held until it closes
	return n, err
}

func (c *conn) Write(b []byte) (int, error) {
	c.stall()
	select {
	case <-c.done:
		return 0, net.ErrClosed
	default:
	}
	return c.Conn.Write(b)
}

func (c *conn) Close() error {
	c.p.mu.Lock()
	delete(c.p.conns, c)
	c.p.mu.Unlock()
	return c.close()
}

func (c *conn) close() error {
	err := net.ErrClosed
	c.doneOnce.Do(func() {
		close(c.done)
		err = c.Conn.Close()
	})
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// reset closes the connection with a TCP RST.
func (c *conn) reset() {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.close()
}
