package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStateRoundTripIsPrivateAndAtomic(t *testing.T) {
	dir := t.TempDir()
	if _, err := readState(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("reading an absent state: %v, want not exist", err)
	}
	w := &stateWriter{dir: dir, now: time.Now, s: State{PID: 42, Dir: dir, Clusters: []string{"member-1"}}}
	if err := w.update(func(s *State) { s.Control = &Control{URL: "http://127.0.0.1:1", Token: "secret"} }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := w.step("first", func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := w.step("second", func() error { return boom }); err != boom {
		t.Fatalf("step returns its function's error, got %v", err)
	}
	got, err := readState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.PID != 42 || got.Control.Token != "secret" || len(got.Steps) != 2 || got.Steps[0].Done == nil || got.Steps[0].Error != "" ||
		got.Steps[1].Error != "boom" || got.Error != "second: boom" {
		t.Errorf("state read back: %+v", got)
	}
	info, err := os.Stat(filepath.Join(dir, stateFileName))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("state.json holds the control token: mode %v, want 0600", info.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".state-") {
			t.Errorf("a temporary state file was left: %s", e.Name())
		}
	}
	if err := os.WriteFile(filepath.Join(dir, stateFileName), []byte("{half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readState(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a broken state should be an error that names it, got %v", err)
	}
}

// The lock says whether a sandbox runs, and records its pid; it is released when its holder
// closes it (or dies).
func TestLockTellsWhetherASandboxRuns(t *testing.T) {
	dir := t.TempDir()
	if running(dir) {
		t.Fatal("nothing holds the lock yet")
	}
	lock, err := acquireLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := recordPID(lock); err != nil {
		t.Fatal(err)
	}
	if !running(dir) {
		t.Errorf("running should see the held lock")
	}
	if _, err := acquireLock(dir); !errors.Is(err, errLocked) {
		t.Errorf("a second lock should fail with errLocked, got %v", err)
	}
	if pid := lockPID(dir); pid != os.Getpid() {
		t.Errorf("lockPID = %d, want %d", pid, os.Getpid())
	}
	// Checking does not overwrite the pid of the holder.
	running(dir)
	if pid := lockPID(dir); pid != os.Getpid() {
		t.Errorf("lockPID after running() = %d", pid)
	}
	lock.Close()
	if running(dir) {
		t.Errorf("a released lock means no sandbox runs")
	}
}

func TestRemoveStateKeepsLogsUnlessAsked(t *testing.T) {
	dir := t.TempDir()
	l := layout{dir}
	for _, p := range []string{l.state(), l.kubeconfig(), filepath.Join(l.logs(), "a.log")} {
		_ = os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeState(dir, false); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{l.state(): false, l.kubeconfig(): false, l.logs(): true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s exists=%v, want %v", p, err == nil, want)
		}
	}
	if err := removeState(dir, true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.logs()); err == nil {
		t.Errorf("logs should be gone")
	}
	if err := removeState(dir, true); err != nil {
		t.Errorf("removing an absent state is not an error: %v", err)
	}
}

func TestShortRevisionAndCommit(t *testing.T) {
	rev := "main@sha1:0123456789abcdef0123456789abcdef01234567"
	if got := shortRevision(rev); got != "main@sha1:0123456789ab" {
		t.Errorf("shortRevision = %q", got)
	}
	if got := commitOf(rev); got != "0123456789ab" {
		t.Errorf("commitOf = %q", got)
	}
	if shortRevision("") != "" || commitOf("") != "" {
		t.Errorf("empty revisions stay empty")
	}
}

// The sandbox's keys are made once, the private half mode 0600, and read back on the next start.
func TestSandboxKeysAreMadeOnceAndKept(t *testing.T) {
	l := layout{t.TempDir()}
	signer, err := sandboxSigner(l)
	if err != nil {
		t.Fatal(err)
	}
	cosign, err := sandboxCosignKey(l)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{l.signingKey(), l.cosignKey()} {
		if info, err := os.Stat(p); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v", p, err, info)
		}
	}
	again, err := sandboxSigner(l)
	if err != nil || again.KeyID() != signer.KeyID() {
		t.Errorf("the signing key read back: %v, key %s, want %s", err, again.KeyID(), signer.KeyID())
	}
	cosignAgain, err := sandboxCosignKey(l)
	if err != nil || string(cosignAgain.PublicPEM) != string(cosign.PublicPEM) {
		t.Errorf("the cosign key read back: %v", err)
	}
	if pub, err := os.ReadFile(l.cosignPub()); err != nil || string(pub) != string(cosign.PublicPEM) {
		t.Errorf("cosign.pub: %v", err)
	}
	if err := os.WriteFile(l.cosignKey(), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sandboxCosignKey(l); err == nil || !strings.Contains(err.Error(), "remove it to make a new one") {
		t.Errorf("a broken cosign.key: %v", err)
	}
}
