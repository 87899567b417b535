// Command tidegate-sandbox runs a whole fleet on this machine, in the background: a hub and member
// API servers, Flux, a Git server with the demo fleet, the tidegate controller and a workload
// simulator, and plays the demo against it (internal/sandbox). `tidegate sandbox ...` runs it; it is
// a binary of its own so that the tidegate CLI (and the flux fleet plugin, and tidegate mcp) does
// not link the controller, Flux's libraries and the local fleet.
//
// Its commands are the CLI's `sandbox` commands: up, status, down, and the hidden run that is the
// background process. Exit codes: 0 success, 1 the answer is no (the sandbox did not start, the demo
// failed, no sandbox runs), 2 usage.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/tidegate/tidegate/internal/sandbox"
	"github.com/tidegate/tidegate/internal/sandboxcmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := sandbox.NewCommand()
	root.Use = sandboxcmd.Binary
	// Completion is the CLI's: tidegate completion completes tidegate sandbox too.
	root.CompletionOptions.DisableDefaultCmd = true
	code := sandbox.Execute(ctx, root, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
