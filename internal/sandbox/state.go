package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The files of a sandbox directory.
const (
	stateFileName      = "state.json"
	lockFileName       = "sandbox.lock"
	sandboxLogName     = "sandbox.log"
	kubeconfigFileName = "kubeconfig"
	logsDirName        = "logs"
	signingKeyName     = "signing.key"
	signingPubName     = "signing.pub"
)

// State is what the background process tells the commands about the sandbox, in DIR/state.json.
// Only the background process writes it, atomically, mode 0600: it holds the control token.
type State struct {
	// PID of the background process (`sandbox run`).
	PID int `json:"pid"`
	// Dir is the sandbox directory.
	Dir string `json:"dir"`
	// Clusters are the member clusters' names.
	Clusters []string `json:"clusters"`
	// Namespace on the hub holding the FleetClusters, the rollout and the members' kubeconfig Secrets.
	Namespace string `json:"namespace"`
	// StartedAt is when the background process started.
	StartedAt time.Time `json:"startedAt"`
	// Kubeconfig is a kubeconfig file of the hub (admin), its context's namespace set to Namespace.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// Hub is the hub API server's URL.
	Hub string `json:"hub,omitempty"`
	// LogDir holds the logs of every process of the fleet and of tidegate.
	LogDir string `json:"logDir"`
	// SandboxLog is the background process's own output.
	SandboxLog string `json:"sandboxLog"`
	// FleetDir is the local fleet's working directory (API server data, Flux storage); removed on stop.
	FleetDir string `json:"fleetDir,omitempty"`
	// Git maps each demo repository to its URL on the sandbox's Git server.
	Git map[string]string `json:"git,omitempty"`
	// Initial maps each demo repository to the revision of its first commit (`main@sha1:<sha>`).
	Initial map[string]string `json:"initial,omitempty"`
	// OCI is where the package is pushed when the sandbox delivers it as OCI artifacts (--oci).
	OCI *OCIState `json:"oci,omitempty"`
	// Prometheus is the base URL of the sandbox's Prometheus, which scrapes the workload simulator's
	// service metrics (http_requests_total and http_request_duration_seconds, by cluster, namespace
	// and workload) every second; the demo rollout's spec.metrics names it.
	Prometheus string `json:"prometheus,omitempty"`
	// Control is the background process's control endpoint, for the demo driver.
	Control *Control `json:"control,omitempty"`
	// Steps are the start-up steps, in order.
	Steps []Step `json:"steps"`
	// Ready is true once the fleet, tidegate, the simulator, Prometheus and the demo repositories
	// are up.
	Ready bool `json:"ready"`
	// Error says why the start-up failed; the background process then exits.
	Error string `json:"error,omitempty"`
}

// OCIState is the sandbox's OCI delivery of the package.
type OCIState struct {
	// Repository is the package's repository in the sandbox's registry (<host>/podinfo); each
	// release is pushed to its tag latest (to the tag of its chart version, with Chart) and signed.
	Repository string `json:"repository"`
	// CosignPub is the public key (cosign.pub) source-controller verifies the signatures with.
	CosignPub string `json:"cosignPub"`
	// Chart is true when the package is a Helm chart (--helm): each release is pushed to
	// Repository's tag of its chart version, and helm-controller installs it.
	Chart bool `json:"chart,omitempty"`
}

// Control is the address of the control endpoint and the token it requires.
type Control struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// Step is one start-up step of the background process.
type Step struct {
	Name    string     `json:"name"`
	Started time.Time  `json:"started"`
	Done    *time.Time `json:"done,omitempty"`
	Error   string     `json:"error,omitempty"`
}

// Layout of a sandbox directory.
type layout struct{ dir string }

func (l layout) state() string      { return filepath.Join(l.dir, stateFileName) }
func (l layout) lock() string       { return filepath.Join(l.dir, lockFileName) }
func (l layout) sandboxLog() string { return filepath.Join(l.dir, sandboxLogName) }
func (l layout) kubeconfig() string { return filepath.Join(l.dir, kubeconfigFileName) }
func (l layout) logs() string       { return filepath.Join(l.dir, logsDirName) }

// signingKey and signingPub hold the key the sandbox's controller signs receipts and ledger
// entries with (Ed25519, made by the first sandbox of the directory) and its public half.
func (l layout) signingKey() string { return filepath.Join(l.dir, signingKeyName) }
func (l layout) signingPub() string { return filepath.Join(l.dir, signingPubName) }
func (l layout) cosignKey() string  { return filepath.Join(l.dir, "cosign.key") }
func (l layout) cosignPub() string  { return filepath.Join(l.dir, "cosign.pub") }

// readState reads DIR/state.json; an absent file is an error satisfying errors.Is(err, fs.ErrNotExist).
func readState(dir string) (*State, error) {
	b, err := os.ReadFile(layout{dir}.state())
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("reading %s: %w", layout{dir}.state(), err)
	}
	return &s, nil
}

// writeState writes s to DIR/state.json, mode 0600, through a rename so that a reader never sees
// half of it.
func writeState(dir string, s *State) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	path := layout{dir}.state()
	tmp, err := os.CreateTemp(dir, ".state-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// errLocked says another process holds the sandbox's lock: a sandbox runs in that directory.
var errLocked = errors.New("another process holds the sandbox lock")

// acquireLock takes DIR/sandbox.lock for the life of the calling process (until the file is closed
// or the process ends, whatever way it ends). The background process holds it while it runs, so
// the lock, not the pid in state.json, says whether a sandbox runs: a pid can be reused.
func acquireLock(dir string) (*os.File, error) {
	f, err := os.OpenFile(layout{dir}.lock(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, fmt.Errorf("locking %s: %w", layout{dir}.lock(), err)
	}
	return f, nil
}

// recordPID writes the calling process's pid into the lock file it holds, so that `sandbox down` can
// stop it even before it wrote its state.
func recordPID(lock *os.File) error {
	if err := lock.Truncate(0); err != nil {
		return err
	}
	_, err := lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// lockPID is the pid recorded in DIR's lock file, 0 when there is none.
func lockPID(dir string) int {
	b, err := os.ReadFile(layout{dir}.lock())
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// running reports whether a sandbox process holds DIR's lock.
func running(dir string) bool {
	f, err := acquireLock(dir)
	if err != nil {
		return errors.Is(err, errLocked)
	}
	f.Close()
	return false
}

// stateWriter is the background process's copy of the state, written out on every change.
type stateWriter struct {
	dir string
	mu  sync.Mutex
	s   State
	now func() time.Time
}

// update changes the state and writes it.
func (w *stateWriter) update(change func(s *State)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	change(&w.s)
	return writeState(w.dir, &w.s)
}

// step runs fn as the named start-up step, recording its start, end and error.
func (w *stateWriter) step(name string, fn func() error) error {
	i := 0
	_ = w.update(func(s *State) {
		s.Steps = append(s.Steps, Step{Name: name, Started: w.now()})
		i = len(s.Steps) - 1
	})
	err := fn()
	_ = w.update(func(s *State) {
		done := w.now()
		s.Steps[i].Done = &done
		if err != nil {
			s.Steps[i].Error = err.Error()
			s.Error = fmt.Sprintf("%s: %v", name, err)
		}
	})
	return err
}

// snapshot returns a copy of the state.
func (w *stateWriter) snapshot() State {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.s
	return s
}
