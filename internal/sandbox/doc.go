// Package sandbox is what `tidegate sandbox` does, in the binary tidegate-sandbox (the commands are
// internal/sandboxcmd's; the CLI runs that binary for them): a whole fleet on one machine, started
// in the background (a hub and member API servers, Flux, a Git server with the embedded demo fleet,
// the tidegate controller, the workload simulator and a Prometheus scraping its service traffic,
// from internal/localfleet and internal/simulator), and a demo that plays releases of a package
// against it through commits, approvals and simulator faults.
//
// `sandbox up` re-executes its binary as the hidden `sandbox run`, in a session of its own, and
// follows its start-up through DIR/state.json; `run` holds DIR/sandbox.lock while it lives, which is
// how the other commands tell whether a sandbox runs. The demo driver acts on the hub through
// DIR/kubeconfig, and on the Git repositories and the simulator through a control endpoint that
// `run` serves on 127.0.0.1 with a token (both in state.json, mode 0600).
package sandbox
