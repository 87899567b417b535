package testenv

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// Proxy is a TCP proxy in front of a real server (a member API server) that can be made slow or
// silent, as a member behind a congested or broken network is: TLS passes through it untouched, so a
// client reaches the real server with its own credentials.
type Proxy struct {
	// Addr is where the proxy listens, 127.0.0.1:<port>.
	Addr string

	target string
	l      net.Listener
	delay  atomic.Int64 // nanoseconds added before each chunk a client sends is passed on
	silent atomic.Bool  // new connections are accepted and never answered

	mu    sync.Mutex
	conns []net.Conn
}

// TB is the part of testing.TB a Proxy uses.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
}

// StartProxy starts a proxy to target (host:port) for t and closes it, and every connection through
// it, when t ends.
func StartProxy(t TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listening: %v", err)
	}
	p := &Proxy{Addr: l.Addr().String(), target: target, l: l}
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

// ProxyConfig returns a copy of cfg that reaches cfg's server through a new proxy, and the proxy.
func ProxyConfig(t TB, cfg *rest.Config) (*rest.Config, *Proxy) {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Host == "" {
		t.Fatalf("config host %q: %v", cfg.Host, err)
	}
	p := StartProxy(t, u.Host)
	out := rest.CopyConfig(cfg)
	u.Host = p.Addr
	out.Host = u.String()
	return out, p
}

// Delay makes the proxy hold every chunk a client sends for d before passing it on (0: none): each
// request then takes at least d.
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

// Silence makes the proxy accept new connections and never answer them (a black hole), or pass them
// on again. Connections already open are not touched: close them with Reset.
func (p *Proxy) Silence(on bool) { p.silent.Store(on) }

// Reset closes every connection through the proxy, so that clients dial again.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() {
	_ = p.l.Close()
	p.Reset()
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns = append(p.conns, c)
}

func (p *Proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.track(c)
		if p.silent.Load() {
			continue // held open, never read from
		}
		go p.pipe(c)
	}
}

func (p *Proxy) pipe(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.track(s)
	go func() {
		_, _ = io.Copy(c, s)
		_ = c.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); d > 0 {
				time.Sleep(d)
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = s.Close()
}
