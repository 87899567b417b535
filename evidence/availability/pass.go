package availability

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/evidence"
)

// Defaults for PassOptions.
const (
	// DefaultPassParallel is how many members a pass samples at once: a sample is a few GETs on one
	// member API server, and members answer at their own pace, so many can be asked at once.
	DefaultPassParallel = 100
	// DefaultMemberTimeout bounds one member's sample in a pass that has time to spare.
	DefaultMemberTimeout = 10 * time.Second
)

// Member is one cluster a pass samples.
type Member struct {
	// Cluster names its samples (Observe's cluster).
	Cluster string
	// Reader returns the client that reads its workloads, within ctx (the member's deadline). An
	// error makes every read of this sample fail with it. nil: no client, every read fails.
	Reader func(ctx context.Context) (client.Reader, error)
	// Workloads are what to read.
	Workloads []Workload
}

// PassOptions bound a pass.
type PassOptions struct {
	// Parallel is how many members are sampled at once (DefaultPassParallel when 0).
	Parallel int
	// Budget is how long the whole pass may take (the Sampler's interval when 0): the next pass is
	// due then.
	Budget time.Duration
	// MemberTimeout bounds one member's sample (DefaultMemberTimeout when 0); the pass shortens it so
	// that every round of Parallel members fits in Budget.
	MemberTimeout time.Duration
	// Now is the clock samples are timed by (time.Now when nil).
	Now func() time.Time
}

// PassResult says how a pass went.
type PassResult struct {
	// MemberTimeout is the deadline each member had.
	MemberTimeout time.Duration
	// Failed are the members whose sample had a failed read (a missed deadline, an error), sorted.
	Failed []string
}

// ObservePass takes one sample of every member, at most Parallel at once, each within its own
// deadline (evidence.MemberDeadline of Budget): a member that is slow or does not answer misses its deadline,
// its reads not done by then fail, and its sample is recorded as such (a failed read counts one
// interval, see ClusterSummary); the others are not held up by it. Samples are timed when each
// member's turn begins. When ctx ends, the members not sampled yet are left out (the caller is
// going away: nothing is recorded for them).
func (s *Sampler) ObservePass(ctx context.Context, members []Member, opts PassOptions) PassResult {
	if opts.Parallel <= 0 {
		opts.Parallel = DefaultPassParallel
	}
	if opts.Budget <= 0 {
		opts.Budget = s.opts.Interval
	}
	if opts.MemberTimeout <= 0 {
		opts.MemberTimeout = DefaultMemberTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	res := PassResult{MemberTimeout: evidence.MemberDeadline(len(members), opts.Parallel, opts.Budget, opts.MemberTimeout)}
	var mu sync.Mutex
	evidence.Each(len(members), opts.Parallel, func(i int) {
		if failed := s.observeMember(ctx, members[i], res.MemberTimeout, opts.Now); failed {
			mu.Lock()
			res.Failed = append(res.Failed, members[i].Cluster)
			mu.Unlock()
		}
	})
	sort.Strings(res.Failed)
	return res
}

// observeMember samples one member within timeout and says whether a read failed.
func (s *Sampler) observeMember(ctx context.Context, m Member, timeout time.Duration, now func() time.Time) bool {
	if ctx.Err() != nil {
		return false
	}
	at := now()
	mctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var reader client.Reader
	if m.Reader != nil {
		r, err := m.Reader(mctx)
		switch {
		case err != nil:
			reader = errReader{fmt.Errorf("no client for the cluster: %w", err)}
		case mctx.Err() != nil && ctx.Err() == nil:
			reader = errReader{fmt.Errorf("no client for the cluster within the member's deadline of %s", timeout)}
		default:
			reader = r
		}
	}
	readCtx := mctx
	if mctx.Err() != nil && ctx.Err() == nil {
		// The deadline went on reaching the member: record the failed sample all the same.
		readCtx = ctx
	}
	err := s.Observe(readCtx, m.Cluster, reader, m.Workloads, at)
	return err != nil && ctx.Err() == nil
}

// errReader is a client.Reader that fails every read with err: a member whose client could not be had.
type errReader struct{ err error }

func (e errReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return e.err
}
func (e errReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return e.err }
