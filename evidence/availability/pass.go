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
	// MemberTimeout bounds one member's sample (DefaultMemberTimeout when 0); the pass shortens it to
	// half its Budget, and to what is left of the Budget when the member's turn comes.
	MemberTimeout time.Duration
	// Now is the clock samples are timed by (time.Now when nil). The pass's own deadlines are
	// wall-clock time.
	Now func() time.Time
}

// PassResult says how a pass went.
type PassResult struct {
	// MemberTimeout is the most time one member had.
	MemberTimeout time.Duration
	// Failed are the members whose sample had a failed read (a missed deadline, an error, no turn
	// before the pass's time ran out), sorted.
	Failed []string
	// NotReached are those of them that had no turn before the pass's time ran out, sorted: they were
	// not asked.
	NotReached []string
}

// ObservePass takes one sample of every member, in the order given, at most Parallel at once, and
// ends within Budget. Each member has its own deadline: MemberTimeout, at most half the Budget, and
// at most what is left of the Budget when its turn comes. A member that is slow or does not answer
// misses its deadline, its reads not done by then fail, and its sample is recorded as such (a
// failed sample counts one interval, see ClusterSummary); it holds one of the Parallel slots while
// it waits, and the others go on. A member whose turn has not come when the Budget is spent is
// recorded as a failed sample too, without being asked: fail closed. A caller that puts the members
// that failed last time at the end keeps a few slow members from costing the others their turn.
// Samples are timed when each member's turn begins. When ctx ends, the members not sampled yet are
// left out (the caller is going away: nothing is recorded for them).
//
// Half the Budget rather than a share of it per round (as a preflight's deadlines are): the sample
// interval is seconds, and its share among the rounds of a large wave (500ms for 1,000 members at
// 5s) is less than a loaded member needs for a few GETs. A failed read is a sample counted as
// unavailable, so a deadline that busy members miss costs them their soak.
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
	end := time.Now().Add(opts.Budget)
	res := PassResult{MemberTimeout: min(opts.MemberTimeout, opts.Budget/2)}
	var mu sync.Mutex
	evidence.Each(len(members), opts.Parallel, func(i int) {
		failed, reached := s.observeMember(ctx, members[i], min(res.MemberTimeout, time.Until(end)), opts)
		if failed {
			mu.Lock()
			res.Failed = append(res.Failed, members[i].Cluster)
			if !reached {
				res.NotReached = append(res.NotReached, members[i].Cluster)
			}
			mu.Unlock()
		}
	})
	sort.Strings(res.Failed)
	sort.Strings(res.NotReached)
	return res
}

// observeMember samples one member within timeout and says whether a read failed, and whether the
// member was asked at all (no time left: it was not).
func (s *Sampler) observeMember(ctx context.Context, m Member, timeout time.Duration, opts PassOptions) (failed, reached bool) {
	if ctx.Err() != nil {
		return false, false
	}
	at := opts.Now()
	if timeout <= 0 {
		err := s.Observe(ctx, m.Cluster, errReader{fmt.Errorf("not sampled: the pass's %s ran out before this cluster's turn", opts.Budget)}, m.Workloads, at)
		return err != nil && ctx.Err() == nil, false
	}
	mctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var reader client.Reader
	if m.Reader != nil {
		r, err := m.Reader(mctx)
		switch {
		case err != nil:
			reader = errReader{fmt.Errorf("no client for the cluster: %w", err)}
		case mctx.Err() != nil && ctx.Err() == nil:
			reader = errReader{fmt.Errorf("no client for the cluster within its deadline of %s", timeout)}
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
	return err != nil && ctx.Err() == nil, true
}

// errReader is a client.Reader that fails every read with err: a member whose client could not be had.
type errReader struct{ err error }

func (e errReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return e.err
}
func (e errReader) List(context.Context, client.ObjectList, ...client.ListOption) error { return e.err }
