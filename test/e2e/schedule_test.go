package e2e

import (
	"flag"
	"slices"
	"sync"
	"testing"
	"time"
)

// scenarios is how many scenarios run at once (make test passes E2E_PARALLEL). go test's own
// -parallel is set above the number of scenarios, so that every scenario reaches parallel at once
// and this schedule, not the order of the source files, decides which start first.
var scenarios = flag.Int("e2e.parallel", 10, "how many end-to-end scenarios run at once (the longest first)")

// longestFirst are the scenarios that take longest, longest first, as measured in whole runs of the
// package (docs/testing.md). They start before the others, so that the run does not end on one of
// them started last, with the machine idle beside it. A scenario not listed starts after them, in
// the order go test reaches it; the list orders, it decides nothing else.
var longestFirst = []string{
	"TestE2EFaultMembersAwayWhenAReleaseStarts",
	"TestE2EFaultKustomizationEditedOrSuspended",
	"TestE2EFaultMemberUnreachableMidWaveKeepsItsPlace",
	"TestE2ERestartMidSoakRemembersADisruption",
	"TestE2EFaultMemberBlackholedDuringPreflight",
	"TestE2ERehearsal",
	"TestE2ERollbackAfterArtifactGC",
	"TestE2ESignedReceiptsAndLedger",
	"TestE2ENewRevisionDuringWave",
	"TestE2ECrashPointsAlongARollout",
	"TestE2ETranscripts",
	"TestE2EFaultSourceControllerLosesItsStorage",
	"TestE2EFaultMemberBlackholedDuringRollback",
	"TestE2EHoldAndSuspend",
	"TestE2EOCIRolloutVerified",
	"TestE2EATemplateEditIsACandidate",
	"TestE2EChartRollbackToTheKnownGoodChart",
	"TestE2EDeploySafePreflightsTheFleet",
	"TestE2EFaultMemberBlackholedDuringSoak",
}

// schedule admits scenarios, at most *scenarios at once, the highest priority first.
var schedule struct {
	mu      sync.Mutex
	open    bool // the first scenario's wait for the others to arrive is over
	running int
	waiting []*turn
}

type turn struct {
	rank    int // lower starts first
	granted chan struct{}
}

// parallel marks t parallel and waits for its turn to run, which it holds until it ends. Call it
// first in every scenario, instead of t.Parallel.
func parallel(t *testing.T) {
	t.Helper()
	t.Parallel()
	rank := slices.Index(longestFirst, t.Name())
	if rank < 0 {
		rank = len(longestFirst)
	}
	began := time.Now()
	waitTurn(rank)
	t.Cleanup(endTurn)
	// hack/testsummary ranks the slowest tests by their time less this wait.
	t.Logf("schedule: waited %.1fs for its turn", time.Since(began).Seconds())
}

// waitTurn queues a turn of rank and waits until it is granted.
func waitTurn(rank int) {
	tn := &turn{rank: rank, granted: make(chan struct{})}
	schedule.mu.Lock()
	i := len(schedule.waiting) // among equal ranks, the order of arrival
	for i > 0 && schedule.waiting[i-1].rank > rank {
		i--
	}
	schedule.waiting = slices.Insert(schedule.waiting, i, tn)
	if schedule.open {
		grant()
	} else if len(schedule.waiting) == 1 {
		// go test releases every parallel scenario at once, when the sequential part of the run
		// ends; the first to arrive waits a moment for the others, so that the first turns go to
		// the longest of them all, not to whoever came first.
		time.AfterFunc(200*time.Millisecond, func() {
			schedule.mu.Lock()
			defer schedule.mu.Unlock()
			schedule.open = true
			grant()
		})
	}
	schedule.mu.Unlock()
	<-tn.granted
}

// endTurn gives a turn back.
func endTurn() {
	schedule.mu.Lock()
	defer schedule.mu.Unlock()
	schedule.running--
	grant()
}

// grant starts waiting turns while there is room, highest priority first (under schedule.mu).
func grant() {
	for schedule.running < max(*scenarios, 1) && len(schedule.waiting) > 0 {
		tn := schedule.waiting[0]
		schedule.waiting = schedule.waiting[1:]
		schedule.running++
		close(tn.granted)
	}
}
