package collector

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/verdict"
	"github.com/tidegate/tidegate/verdict/bounded"
)

// Artifact limits: a package or policy artifact larger than this is refused rather than held in memory.
const (
	maxArtifactBytes  = 64 << 20
	maxArtifactFiles  = 20000
	maxUnpackedBytes  = 256 << 20
	maxPolicyFiles    = 64
	maxCachedPolicies = 32
)

// RolloutPolicy is the policy that decides a rollout's gates, with its settings read once.
type RolloutPolicy struct {
	Policy   *verdict.Policy
	Settings verdict.Settings
	// From says where it came from, for messages: "built-in" or "<kind>/<name> path <path> at <revision>".
	From string
	// Err is why the policy cannot decide (a *verdict.PolicyError inside); kept so a broken commit is
	// fetched and compiled once, not on every reconcile.
	Err error
}

// ErrPolicyPending means the policy's source has no artifact yet: the rollout waits, it is not stalled.
var ErrPolicyPending = errors.New("policy source has no artifact yet")

// BuiltinPolicy is the embedded default policy, compiled once.
var BuiltinPolicy = sync.OnceValues(func() (*RolloutPolicy, error) {
	p := verdict.DefaultPolicy()
	s, err := p.Settings()
	if err != nil {
		return nil, fmt.Errorf("the built-in policy's settings: %w", err)
	}
	return &RolloutPolicy{Policy: p, Settings: s, From: "built-in"}, nil
})

// Policy returns the rollout's policy: the built-in one when spec.policy is empty, else the CUE
// package at spec.policy.path in the named source's artifact. It returns ErrPolicyPending (wrapped)
// while the source has no artifact, and a *verdict.PolicyError (wrapped) for a policy that does not
// compile, does not fit the evidence schemas, or whose settings are not concrete.
func (c *Collector) Policy(ctx context.Context, fr *v1alpha1.FleetRollout) (*RolloutPolicy, error) {
	ref := fr.Spec.Policy
	if ref == nil {
		return BuiltinPolicy()
	}
	_, src, err := GetSource(ctx, c.Sources, fr.Namespace, ref.SourceRef.Kind, ref.SourceRef.Name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s %s/%s named by spec.policy.sourceRef is not found", ErrPolicyPending, ref.SourceRef.Kind, fr.Namespace, ref.SourceRef.Name)
		}
		return nil, err
	}
	if src.URL == "" || src.Digest == "" {
		return nil, fmt.Errorf("%w: %s %s/%s: %s", ErrPolicyPending, ref.SourceRef.Kind, fr.Namespace, ref.SourceRef.Name, src.Message)
	}
	dir := path.Clean("/" + ref.Path)
	key := src.Digest + ":" + dir
	if p, ok := c.policies.get(key); ok {
		if p.Err != nil {
			return nil, p.Err
		}
		return p, nil
	}
	from := fmt.Sprintf("%s %s/%s path %s at %s", ref.SourceRef.Kind, fr.Namespace, ref.SourceRef.Name, strings.TrimPrefix(dir, "/"), src.Revision)
	art, _, err := c.fetchArtifact(ctx, src.URL, src.Digest)
	if err != nil {
		return nil, fmt.Errorf("fetching the policy from %s: %w", from, err)
	}
	rp, err := c.compilePolicy(ctx, art.FS, dir)
	var over *bounded.BudgetError
	if errors.As(err, &over) {
		// Not kept: a load that ran out of time on a busy machine may fit the next time. Meanwhile
		// the rollout stalls on it as on any policy that cannot decide.
		return nil, fmt.Errorf("the policy from %s: %w", from, &verdict.PolicyError{Problems: []string{err.Error()}})
	}
	if err != nil {
		err = fmt.Errorf("the policy from %s: %w", from, err)
		c.policies.put(key, &RolloutPolicy{From: from, Err: err}, maxCachedPolicies)
		return nil, err
	}
	rp.From = from
	c.policies.put(key, rp, maxCachedPolicies)
	return rp, nil
}

// compilePolicy loads the CUE package in dir and reads its settings: first in a worker under
// c.PolicyBudget (when set), so that a policy too expensive to load ends there (*bounded.BudgetError)
// rather than in the controller, then in-process, which is then known to fit. Every other error is
// a *verdict.PolicyError: a wrong path or a package that does not compile is fixed in Git or the spec.
func (c *Collector) compilePolicy(ctx context.Context, fsys filesys.FileSystem, dir string) (*RolloutPolicy, error) {
	files, err := cueFiles(fsys, dir)
	if err != nil {
		return nil, &verdict.PolicyError{Problems: []string{err.Error()}}
	}
	if c.PolicyBudget != nil {
		if err := c.PolicyBudget.Load(ctx, files); err != nil {
			return nil, err
		}
	}
	p, err := verdict.LoadPolicy(files)
	if err != nil {
		return nil, err
	}
	s, err := p.Settings()
	if err != nil {
		return nil, err
	}
	return &RolloutPolicy{Policy: p, Settings: s}, nil
}

// cueFiles returns the .cue files directly in dir: one CUE package.
func cueFiles(fsys filesys.FileSystem, dir string) (map[string][]byte, error) {
	if !fsys.IsDir(dir) {
		return nil, fmt.Errorf("the artifact has no directory %s: fix spec.policy.path", strings.TrimPrefix(dir, "/"))
	}
	entries, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, e := range entries {
		p := path.Join(dir, e)
		if !strings.HasSuffix(e, ".cue") || fsys.IsDir(p) {
			continue
		}
		if len(files) == maxPolicyFiles {
			return nil, fmt.Errorf("more than %d .cue files in %s", maxPolicyFiles, strings.TrimPrefix(dir, "/"))
		}
		b, err := fsys.ReadFile(p)
		if err != nil {
			return nil, err
		}
		files[e] = b
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no .cue file in %s: fix spec.policy.path", strings.TrimPrefix(dir, "/"))
	}
	return files, nil
}

// fetchArtifact downloads and unpacks a source artifact, checking its digest; data is the
// artifact as served (a chart's archive is rendered from it).
func (c *Collector) fetchArtifact(ctx context.Context, url, digest string) (art *evidence.Artifact, data []byte, err error) {
	data, err = evidence.FetchArtifact(ctx, c.HTTPClient, url, digest, maxArtifactBytes)
	if err != nil {
		return nil, nil, err
	}
	art, err = evidence.Extract(data, maxArtifactFiles, maxUnpackedBytes)
	return art, data, err
}
