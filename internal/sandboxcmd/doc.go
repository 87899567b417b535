// Package sandboxcmd is the command tree of the sandbox: `sandbox up`, `status`, `down` and the
// hidden `run`, their flags, help and checks, and the exit codes their errors carry. What a command
// does is an Actions': the sandbox's binary, tidegate-sandbox, does it (internal/sandbox), and the
// tidegate CLI, which must not link the sandbox's fleet, the controller and Flux's libraries with
// it, hands it to tidegate-sandbox (Exec). Both show the same commands, so `tidegate sandbox up
// --help` and docs/cli.md need no sandbox binary.
package sandboxcmd
