package localfleet

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/fluxcd/pkg/gittestserver"
	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// GitRepo is a repository on the fleet's Git server with a local clone that callers commit to.
type GitRepo struct {
	// URL is the repository's address for Flux GitRepositories.
	URL string
	// Branch is the branch commits go to.
	Branch string

	mu   sync.Mutex
	dir  string
	repo *gogit.Repository
}

func startGitServer() (*gittestserver.GitServer, error) {
	srv, err := gittestserver.NewTempGitServer()
	if err != nil {
		return nil, fmt.Errorf("creating git server: %w", err)
	}
	srv.AutoCreate()
	if err := srv.StartHTTP(); err != nil {
		os.RemoveAll(srv.Root())
		return nil, fmt.Errorf("starting git server: %w", err)
	}
	return srv, nil
}

// NewRepo creates repository name on the Git server with one commit holding files (path → content)
// on branch main, and returns it with the commit's SHA.
func (f *Fleet) NewRepo(name string, files map[string]string) (*GitRepo, string, error) {
	dir, err := os.MkdirTemp(f.Dir, "clone-"+name+"-")
	if err != nil {
		return nil, "", err
	}
	repo, err := gogit.PlainInitWithOptions(dir, &gogit.PlainInitOptions{
		InitOptions: gogit.InitOptions{DefaultBranch: plumbing.NewBranchReferenceName("main")},
	})
	if err != nil {
		return nil, "", fmt.Errorf("initialising clone of %s: %w", name, err)
	}
	url := f.git.HTTPAddress() + "/" + name + ".git"
	if _, err := repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{url}}); err != nil {
		return nil, "", fmt.Errorf("adding remote for %s: %w", name, err)
	}
	r := &GitRepo{URL: url, Branch: "main", dir: dir, repo: repo}
	sha, err := r.Commit("initial content", files, nil)
	if err != nil {
		return nil, "", err
	}
	return r, sha, nil
}

// Commit writes files (path → content), removes the paths in remove, commits and pushes. It returns the new commit's SHA.
func (r *GitRepo) Commit(message string, files map[string]string, remove []string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	wt, err := r.repo.Worktree()
	if err != nil {
		return "", err
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(r.dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(full, []byte(files[p]), 0o644); err != nil {
			return "", err
		}
		if _, err := wt.Add(p); err != nil {
			return "", fmt.Errorf("adding %s: %w", p, err)
		}
	}
	for _, p := range remove {
		if _, err := wt.Remove(p); err != nil {
			return "", fmt.Errorf("removing %s: %w", p, err)
		}
	}
	hash, err := wt.Commit(message, &gogit.CommitOptions{
		AllowEmptyCommits: true,
		Author:            &object.Signature{Name: "fleet test", Email: "fleet@tidegate.dev", When: time.Now()},
	})
	if err != nil {
		return "", fmt.Errorf("committing %q: %w", message, err)
	}
	return hash.String(), r.push(false)
}

// ResetHard moves the branch back to sha and force-pushes it, rewriting history as `git push --force` would.
func (r *GitRepo) ResetHard(sha string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	wt, err := r.repo.Worktree()
	if err != nil {
		return err
	}
	if err := wt.Reset(&gogit.ResetOptions{Commit: plumbing.NewHash(sha), Mode: gogit.HardReset}); err != nil {
		return fmt.Errorf("resetting to %s: %w", sha, err)
	}
	return r.push(true)
}

func (r *GitRepo) push(force bool) error {
	ref := config.RefSpec("refs/heads/" + r.Branch + ":refs/heads/" + r.Branch)
	if force {
		ref = "+" + ref
	}
	err := r.repo.Push(&gogit.PushOptions{RemoteName: "origin", RefSpecs: []config.RefSpec{ref}, Force: force})
	if err != nil && err != gogit.NoErrAlreadyUpToDate {
		return fmt.Errorf("pushing %s to %s: %w", r.Branch, r.URL, err)
	}
	return nil
}

// Revision is the Flux artifact revision of a commit on the repo's branch: "<branch>@sha1:<sha>".
func (r *GitRepo) Revision(sha string) string { return r.Branch + "@sha1:" + sha }
