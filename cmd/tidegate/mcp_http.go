package main

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpMaxWait is the longest get_fleet_job waits for a job to settle: the longest a tool call takes.
const mcpMaxWait = 300 * time.Second

// The HTTP transport's bounds. A request's headers and body are small JSON-RPC messages, read in
// seconds; a response may take as long as the longest tool call, since a call is answered on its
// own POST. The server writes nothing of its own accord (no notifications), so the client's
// stream for them carries nothing a write deadline could cut. A session no request came for in
// mcpSessionTimeout is closed, as a client that went away never says so.
const (
	mcpReadHeaderTimeout = 10 * time.Second
	mcpReadTimeout       = 30 * time.Second
	mcpWriteTimeout      = mcpMaxWait + time.Minute
	mcpIdleTimeout       = 2 * time.Minute
	mcpSessionTimeout    = 30 * time.Minute
)

// mcpHTTP is the HTTP transport: its listener (TLS when certificates were given) and the bearer
// token its clients send.
type mcpHTTP struct {
	ln     net.Listener
	scheme string
	token  string
}

// listenMCP reads the bearer token (tokenFile, else $TIDEGATE_MCP_TOKEN) and listens on addr: plain
// HTTP on a loopback address only, as the token and every result would cross any other network in
// clear; with certFile and keyFile, HTTPS on any address.
func listenMCP(addr, tokenFile, certFile, keyFile string) (*mcpHTTP, error) {
	token, err := mcpToken(tokenFile)
	if err != nil {
		return nil, err
	}
	var cfg *tls.Config
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, usageError("mcp --http: reading --tls-cert-file %s and --tls-key-file %s: %v", certFile, keyFile, err)
		}
		cfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	case certFile != "":
		return nil, usageError("mcp --http: --tls-cert-file needs --tls-key-file, the certificate's private key")
	case keyFile != "":
		return nil, usageError("mcp --http: --tls-key-file needs --tls-cert-file, the certificate of the key")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageError("mcp --http: %v", err)
	}
	if cfg == nil {
		if a, ok := ln.Addr().(*net.TCPAddr); !ok || !a.IP.IsLoopback() {
			_ = ln.Close()
			return nil, usageError("mcp --http %s: not a loopback address (it listens on %s), and plain HTTP would carry the bearer token and every result in clear: give --tls-cert-file and --tls-key-file to serve HTTPS, or listen on 127.0.0.1", addr, ln.Addr())
		}
		return &mcpHTTP{ln: ln, scheme: "http", token: token}, nil
	}
	return &mcpHTTP{ln: tls.NewListener(ln, cfg), scheme: "https", token: token}, nil
}

// mcpToken is the bearer token of the HTTP transport: the content of file, else $TIDEGATE_MCP_TOKEN.
func mcpToken(file string) (string, error) {
	token := os.Getenv("TIDEGATE_MCP_TOKEN")
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", usageError("reading --token-file: %v", err)
		}
		token = string(b)
	}
	token = strings.TrimSpace(token)
	if len(token) < 16 {
		return "", usageError("mcp --http requires a bearer token of at least 16 characters, in --token-file or $TIDEGATE_MCP_TOKEN")
	}
	return token, nil
}

// handler serves server at /mcp to clients that send the token.
func (h *mcpHTTP) handler(server *mcp.Server) http.Handler {
	verify := func(_ context.Context, got string, _ *http.Request) (*auth.TokenInfo, error) {
		if subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) != 1 {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{Expiration: time.Now().Add(time.Hour)}, nil
	}
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{SessionTimeout: mcpSessionTimeout})
	mux := http.NewServeMux()
	mux.Handle("/mcp", auth.RequireBearerToken(verify, nil)(sdk))
	return mux
}

// httpServer is the HTTP server of handler, with the transport's bounds.
func (h *mcpHTTP) httpServer(handler http.Handler) *http.Server {
	return &http.Server{Handler: handler, ReadHeaderTimeout: mcpReadHeaderTimeout, ReadTimeout: mcpReadTimeout,
		WriteTimeout: mcpWriteTimeout, IdleTimeout: mcpIdleTimeout}
}

// serve serves server until ctx ends, after printing its endpoint to log.
func (h *mcpHTTP) serve(ctx context.Context, server *mcp.Server, log io.Writer) error {
	srv := h.httpServer(h.handler(server))
	fmt.Fprintf(log, "tidegate mcp: serving %s://%s/mcp\n", h.scheme, h.ln.Addr())
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(h.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
