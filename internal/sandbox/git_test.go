package sandbox

import (
	"context"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/gittestserver"
)

// gitServer starts the Git server the sandbox uses (gittestserver, as localfleet starts it) and
// returns the URL of an empty repository name on it.
func gitServer(t *testing.T, name string) string {
	t.Helper()
	log.SetOutput(io.Discard)
	srv, err := gittestserver.NewTempGitServer()
	if err != nil {
		t.Fatal(err)
	}
	srv.AutoCreate()
	if err := srv.StartHTTP(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.StopHTTP(); os.RemoveAll(srv.Root()) })
	return srv.HTTPAddress() + "/" + name + ".git"
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@example.com", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// The sandbox commits through a fresh clone each time, so a push someone made with git in between
// does not make its commit fail; and what up suggests works: clone -b main (the server's HEAD names
// master), commit, push.
func TestRemoteRepoCommitsOverSomeoneElsesPush(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("the sandbox's Git server needs git: %v", err)
	}
	url := gitServer(t, "podinfo")
	ctx := context.Background()

	// The first commit creates the repository, as localfleet's NewRepo does.
	seed := t.TempDir()
	git(t, seed, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(seed, "README.md"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, seed, "add", ".")
	git(t, seed, "commit", "-q", "-m", "initial")
	git(t, seed, "push", "-q", url, "main")

	r := &remoteRepo{url: url, branch: "main"}
	sha, err := r.Commit(ctx, "podinfo v2", map[string]string{"app/kustomization.yaml": "v2\n"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.ReadFile(ctx, "app/kustomization.yaml"); err != nil || got != "v2\n" {
		t.Fatalf("ReadFile after the commit: %q, %v", got, err)
	}

	// Someone clones, commits and pushes with git.
	work := filepath.Join(t.TempDir(), "podinfo")
	git(t, filepath.Dir(work), "clone", "-q", "-b", "main", url, work)
	if head := strings.TrimSpace(git(t, work, "rev-parse", "HEAD")); head != sha {
		t.Fatalf("the clone's head is %s, want the sandbox's commit %s", head, sha)
	}
	if err := os.WriteFile(filepath.Join(work, "NOTES.md"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, work, "add", ".")
	git(t, work, "commit", "-q", "-m", "notes")
	git(t, work, "push", "-q", "origin", "main")

	// The sandbox's next commit goes on top of it, and can remove files.
	if _, err := r.Commit(ctx, "podinfo v3", map[string]string{"app/kustomization.yaml": "v3\n"}, []string{"README.md"}); err != nil {
		t.Fatal(err)
	}
	git(t, work, "pull", "-q", "origin", "main")
	log := git(t, work, "log", "--format=%s", "-n", "3")
	if log != "podinfo v3\nnotes\npodinfo v2\n" {
		t.Errorf("history:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(work, "README.md")); err == nil {
		t.Errorf("README.md should be removed")
	}
	if _, err := r.ReadFile(ctx, "missing.yaml"); err == nil {
		t.Errorf("reading a missing file should fail")
	}
}
