package sandbox

import (
	"context"
	"fmt"
	"path"
	"sort"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5"
	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-billy/v5/util"
	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
)

// remoteRepo commits to a repository of the sandbox's Git server through a fresh in-memory clone
// each time: people push to the same repositories with git, so a clone kept between commits could
// be behind the server.
type remoteRepo struct {
	url    string
	branch string
	mu     sync.Mutex
}

// commitAuthor signs the sandbox's commits.
var commitAuthor = object.Signature{Name: "tidegate sandbox", Email: "sandbox@tidegate.dev"}

func (r *remoteRepo) clone(ctx context.Context) (*gogit.Repository, billy.Filesystem, error) {
	fs := memfs.New()
	repo, err := gogit.CloneContext(ctx, memory.NewStorage(), fs, &gogit.CloneOptions{
		URL:           r.url,
		ReferenceName: plumbing.NewBranchReferenceName(r.branch),
		SingleBranch:  true,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("cloning %s: %w", r.url, err)
	}
	return repo, fs, nil
}

// Commit writes files (path → content) and removes the paths in remove, commits and pushes; when
// someone pushed in between, it starts again from a fresh clone. It returns the commit's SHA.
func (r *remoteRepo) Commit(ctx context.Context, message string, files map[string]string, remove []string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		sha, err := r.commitOnce(ctx, message, files, remove)
		if err == nil {
			return sha, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return "", lastErr
}

func (r *remoteRepo) commitOnce(ctx context.Context, message string, files map[string]string, remove []string) (string, error) {
	repo, fs, err := r.clone(ctx)
	if err != nil {
		return "", err
	}
	wt, err := repo.Worktree()
	if err != nil {
		return "", err
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := fs.MkdirAll(path.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := util.WriteFile(fs, p, []byte(files[p]), 0o644); err != nil {
			return "", fmt.Errorf("writing %s: %w", p, err)
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
	author := commitAuthor
	author.When = time.Now()
	hash, err := wt.Commit(message, &gogit.CommitOptions{Author: &author, AllowEmptyCommits: true})
	if err != nil {
		return "", fmt.Errorf("committing %q: %w", message, err)
	}
	ref := config.RefSpec("refs/heads/" + r.branch + ":refs/heads/" + r.branch)
	if err := repo.PushContext(ctx, &gogit.PushOptions{RemoteName: "origin", RefSpecs: []config.RefSpec{ref}}); err != nil {
		return "", fmt.Errorf("pushing %s to %s: %w", r.branch, r.url, err)
	}
	return hash.String(), nil
}

// ReadFile returns the content of file at the branch's head.
func (r *remoteRepo) ReadFile(ctx context.Context, file string) (string, error) {
	_, fs, err := r.clone(ctx)
	if err != nil {
		return "", err
	}
	b, err := util.ReadFile(fs, file)
	if err != nil {
		return "", fmt.Errorf("reading %s of %s: %w", file, r.url, err)
	}
	return string(b), nil
}
