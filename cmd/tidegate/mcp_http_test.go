package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/tidegate/tidegate/internal/scheme"
)

const testMCPToken = "0123456789abcdef0123456789abcdef"

// Plain HTTP is served on a loopback address only: any other is refused with an error that names
// the TLS flags, before the hub is asked anything; half of the TLS flags, or TLS without --http,
// is refused too.
func TestMCPHTTPRefusesPlainHTTPBeyondLoopback(t *testing.T) {
	t.Setenv("TIDEGATE_MCP_TOKEN", testMCPToken)
	ctx := hub(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--http", "0.0.0.0:0"}, "give --tls-cert-file and --tls-key-file"},
		{[]string{"--http", ":0"}, "not a loopback address"},
		{[]string{"--http", "127.0.0.1:0", "--tls-cert-file", "tls.crt"}, "--tls-cert-file needs --tls-key-file"},
		{[]string{"--http", "0.0.0.0:0", "--tls-key-file", "tls.key"}, "--tls-key-file needs --tls-cert-file"},
		{[]string{"--tls-cert-file", "tls.crt", "--tls-key-file", "tls.key"}, "give --http ADDR too"},
	} {
		r := tidegate(ctx, append([]string{"mcp"}, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("tidegate mcp %v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, exitUsage, tc.want)
		}
	}
	h, err := listenMCP("127.0.0.1:0", "", "", "")
	if err != nil || h.scheme != "http" {
		t.Fatalf("plain HTTP on 127.0.0.1: %+v, %v", h, err)
	}
	_ = h.ln.Close()
}

// With a certificate, the server listens on any address and serves HTTPS: a client that trusts
// the certificate and sends the token is served, one speaking plain HTTP to it is not. The HTTP
// server is bounded in time, a response at least as long as the longest tool call.
func TestMCPOverTLS(t *testing.T) {
	t.Setenv("TIDEGATE_MCP_TOKEN", testMCPToken)
	certFile, keyFile, pool := selfSignedCert(t)
	h, err := listenMCP("0.0.0.0:0", "", certFile, keyFile)
	if err != nil {
		t.Fatalf("listening on 0.0.0.0 with TLS: %v", err)
	}
	if h.scheme != "https" {
		t.Errorf("scheme %s, want https", h.scheme)
	}
	srv := h.httpServer(nil)
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.IdleTimeout <= 0 || srv.WriteTimeout <= mcpMaxWait {
		t.Errorf("HTTP server bounds: read header %v, read %v, idle %v, write %v (want it past the longest tool call, %v)",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.IdleTimeout, srv.WriteTimeout, mcpMaxWait)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &mcpServer{k: &kubeOptions{env: &cliEnv{now: func() time.Time { return fixedNow }}}, c: fake.NewClientBuilder().WithScheme(scheme.New()).Build(), ns: "fleet",
		scope: scopeView{Namespace: "fleet", Transport: "http"}}
	done := make(chan error, 1)
	var log strings.Builder
	go func() { done <- h.serve(ctx, s.server(false), &log) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	defer stop()

	port := h.ln.Addr().(*net.TCPAddr).Port
	endpoint := fmt.Sprintf("https://127.0.0.1:%d/mcp", port)
	trusted := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	client := mcp.NewClient(&mcp.Implementation{Name: "tidegate-test", Version: "v0"}, nil)
	session, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{token: testMCPToken, base: trusted}}}, nil)
	if err != nil {
		t.Fatalf("connecting over HTTPS: %v", err)
	}
	defer session.Close()
	var scope scopeView
	if call(ctx, t, session, "get_fleet_scope", map[string]any{}, &scope) || scope.Namespace != "fleet" {
		t.Errorf("get_fleet_scope over HTTPS: %+v", scope)
	}
	plain := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	if s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: plain, MaxRetries: -1,
		HTTPClient: &http.Client{Transport: bearer{token: testMCPToken}}}, nil); err == nil {
		s.Close()
		t.Errorf("connected over plain HTTP to the HTTPS listener")
	}
	session.Close()
	stop()
	if !strings.Contains(log.String(), "serving https://") {
		t.Errorf("the server printed %q, want its https endpoint", log.String())
	}
}

// selfSignedCert writes a certificate for 127.0.0.1, signed by its own key, and that key to files;
// pool trusts it.
func selfSignedCert(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tidegate mcp test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
