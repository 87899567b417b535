package preflight

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/tidegate/tidegate/test/testenv"
)

// Among healthy members, one behind a black hole, one behind a link slower than its deadline and one
// whose kubeconfig cannot be read in time: each of the three fails its own check when its own
// deadline passes, a share of the gate's time (the time ctx has left, shared by the rounds of
// parallel checks), and the healthy ones, checked meanwhile and after, pass. With the gate's time
// as every member's deadline, the three would hold both slots until it ran out, and the members
// after them would never be checked.
func TestASlowOrSilentMemberFailsAloneWithinItsOwnDeadline(t *testing.T) {
	_, ns := setup(t)
	objs := objects(t, ns, webApp)
	silentCfg, silent := testenv.ProxyConfig(t, adminConfig)
	silent.Silence(true)
	slowCfg, slow := testenv.ProxyConfig(t, adminConfig)
	slow.Delay(time.Minute)

	var rs requests
	hanging := func(ctx context.Context) (*rest.Config, error) {
		<-ctx.Done() // a kubeconfig Secret read that does not come back
		return nil, ctx.Err()
	}
	targets := []Target{
		{Name: "member-1", Config: rs.config("member-1", adminConfig, nil)},
		{Name: "silent", Config: rs.config("silent", silentCfg, nil)},
		{Name: "slow", Config: rs.config("slow", slowCfg, nil)},
		{Name: "member-2", Resolve: func(context.Context) (*rest.Config, error) { return rs.config("member-2", adminConfig, nil), nil }},
		{Name: "hanging", Resolve: hanging},
		{Name: "member-3", Config: rs.config("member-3", adminConfig, nil)},
		{Name: "unusable", Resolve: func(context.Context) (*rest.Config, error) {
			return nil, errors.New("fleetcluster fleet/unusable: kubeconfig Secret fleet/unusable not found")
		}},
		{Name: "member-4", Config: rs.config("member-4", adminConfig, nil)},
	}
	// 8 targets, 2 at a time: 4 rounds of the gate's 12 seconds, about 3 seconds each.
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	gateDeadline, _ := ctx.Deadline()
	got := CheckAll(ctx, targets, objs, Options{}, 2)

	for _, i := range []int{0, 3, 5, 7} {
		wantReachable(t, got[i], targets[i].Name, nil, nil)
	}
	wantUnreachable(t, got[1], "silent", "")
	wantUnreachable(t, got[2], "slow", "")
	wantUnreachable(t, got[4], "hanging", "context deadline exceeded")
	wantUnreachable(t, got[6], "unusable", "kubeconfig Secret fleet/unusable not found")
	// Every request was bound by its member's own deadline, before the gate's; the silent and slow
	// members' requests ran into theirs.
	for _, r := range rs.ended() {
		if r.deadline.IsZero() || !r.deadline.Before(gateDeadline) {
			t.Errorf("request %v had deadline %s, want its member's own, before the gate's %s", r, r.deadline, gateDeadline)
		}
		if (r.target == "silent" || r.target == "slow") && (r.err == nil || !r.late) {
			t.Errorf("request %v should have ended by its deadline", r)
		}
	}
	if n := rs.mostTargets(); n > 2 {
		t.Errorf("%d targets had requests in flight at once, want at most 2", n)
	}
}

// A target whose turn comes after the gate's time ended is not checked, and fails closed.
func TestATargetNotReachedInTheGatesTimeFailsClosed(t *testing.T) {
	_, ns := setup(t)
	objs := objects(t, ns, webApp)
	silentCfg, silent := testenv.ProxyConfig(t, adminConfig)
	silent.Silence(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rs requests
	targets := []Target{
		// The gate's time ends while the first target's check waits for an answer.
		{Name: "silent", Config: rs.config("silent", silentCfg, func(*http.Request) error { cancel(); return nil })},
		{Name: "member-1", Config: rs.config("member-1", adminConfig, nil)},
	}
	got := CheckAll(ctx, targets, objs, Options{Timeout: time.Minute}, 1)
	wantUnreachable(t, got[0], "silent", "context canceled")
	wantUnreachable(t, got[1], "member-1", "not checked: the gate's time ran out before this cluster's turn")
	for _, r := range rs.ended() {
		if r.target == "member-1" {
			t.Errorf("member-1 was asked after the gate's time ran out: %v", r)
		}
	}
}
