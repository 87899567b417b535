package controllers

import (
	"fmt"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"slices"
	"strings"
	"testing"
	"time"

	fluxevents "github.com/fluxcd/pkg/runtime/events"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// TestPhaseEvents is the truth table of the events a pass gives from the status it read and the one
// it wrote: one per transition, none for a pass that moved nothing, with the wave, the revision and
// the receipt that decided it.
func TestPhaseEvents(t *testing.T) {
	cand := &v1alpha1.RevisionStatus{Revision: "main@sha1:2", Source: "web-2"}
	good := &v1alpha1.RevisionStatus{Revision: "main@sha1:1", Source: "web-1"}
	at := func(s int) *metav1.Time { tm := metav1.NewTime(time.Unix(1_700_000_000+int64(s), 0)); return &tm }
	canaryFailed := v1alpha1.WaveStatus{Name: "canary", Phase: v1alpha1.WaveFailed, Gates: []v1alpha1.GateOutcome{
		{Gate: v1alpha1.GateDeploySafe, Result: v1alpha1.ResultPass, Receipt: "r-deploy", DecidedAt: at(1)},
		{Gate: v1alpha1.GateNoDisruption, Result: v1alpha1.ResultFail, Receipt: "r-nodisruption", DecidedAt: at(2)},
	}}
	progressing := v1alpha1.FleetRolloutStatus{Phase: v1alpha1.PhaseProgressing, Candidate: cand, LastKnownGood: good,
		Waves: []v1alpha1.WaveStatus{{Name: "canary", Phase: v1alpha1.WaveSoaking}}}
	with := func(st v1alpha1.FleetRolloutStatus, edit func(*v1alpha1.FleetRolloutStatus)) v1alpha1.FleetRolloutStatus {
		st = *st.DeepCopy()
		edit(&st)
		return st
	}
	rollingBack := with(progressing, func(st *v1alpha1.FleetRolloutStatus) {
		st.Phase = v1alpha1.PhaseRollingBack
		st.Waves = []v1alpha1.WaveStatus{canaryFailed}
	})
	blocked := with(progressing, func(st *v1alpha1.FleetRolloutStatus) {
		st.Waves = []v1alpha1.WaveStatus{{Name: "canary", Phase: v1alpha1.WavePending, Gates: []v1alpha1.GateOutcome{
			{Gate: v1alpha1.GateDeploySafe, Result: v1alpha1.ResultFail, Receipt: "r-blocked", DecidedAt: at(3)}}}}
		st.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForGateBlocked, Wave: "canary", Message: "wave canary is blocked before it starts by deploySafe (receipt r-blocked)"}
	})
	for _, tc := range []struct {
		name          string
		read, written v1alpha1.FleetRolloutStatus
		refused       string
		want          []string // reason, then the metadata as key=value
		wantMessage   string
	}{
		{name: "nothing moved", read: progressing, written: progressing},
		{name: "a failed wave rolls back", read: progressing, written: rollingBack,
			want:        []string{"RollingBack", "tidegate.dev/revision=main@sha1:2", "tidegate.dev/wave=canary", "tidegate.dev/receipt=r-nodisruption", "tidegate.dev/gate=noDisruption"},
			wantMessage: "rolling main@sha1:2 back to main@sha1:1: wave canary, noDisruption Fail (receipt r-nodisruption)"},
		{name: "a rollback under way is not announced again", read: rollingBack, written: rollingBack},
		{name: "rolled back", read: rollingBack, written: with(rollingBack, func(st *v1alpha1.FleetRolloutStatus) {
			st.Phase = v1alpha1.PhaseRolledBack
			st.Waves[0].Phase = v1alpha1.WaveRolledBack
		}), want: []string{"RolledBack", "tidegate.dev/receipt=r-nodisruption", "tidegate.dev/wave=canary"}},
		{name: "held", read: progressing, written: with(rollingBack, func(st *v1alpha1.FleetRolloutStatus) {
			st.Phase = v1alpha1.PhaseHeld
			st.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForFailedWave, Wave: "canary", Message: "wave canary failed"}
		}), want: []string{"Held", "tidegate.dev/receipt=r-nodisruption"}, wantMessage: "; wave canary failed"},
		{name: "completed names the last decision", read: progressing, written: with(progressing, func(st *v1alpha1.FleetRolloutStatus) {
			st.Phase = v1alpha1.PhaseCompleted
			st.LastKnownGood = cand
			st.Waves[0].Phase = v1alpha1.WaveSucceeded
			st.Waves[0].Gates = []v1alpha1.GateOutcome{{Gate: v1alpha1.GateNoDisruption, Result: v1alpha1.ResultPass, Receipt: "r-pass", DecidedAt: at(5)}}
		}), want: []string{"Completed", "tidegate.dev/receipt=r-pass", "tidegate.dev/revision=main@sha1:2"}},
		{name: "a blocking gate", read: progressing, written: blocked,
			want: []string{"GateBlocked", "tidegate.dev/receipt=r-blocked", "tidegate.dev/wave=canary"}, wantMessage: "main@sha1:2: wave canary is blocked"},
		{name: "a blocking gate decided again is the same wait", read: blocked, written: with(blocked, func(st *v1alpha1.FleetRolloutStatus) {
			st.Waves[0].Gates[0].Receipt, st.Waves[0].Gates[0].DecidedAt = "r-blocked-again", at(9)
			st.WaitingFor.Message = "wave canary is blocked before it starts by deploySafe (receipt r-blocked-again)"
		})},
		{name: "inconclusive", read: progressing, written: with(progressing, func(st *v1alpha1.FleetRolloutStatus) {
			st.Waves[0].Gates = []v1alpha1.GateOutcome{{Gate: v1alpha1.GateNoDisruption, Result: v1alpha1.ResultInconclusive, Receipt: "r-inc", DecidedAt: at(4)}}
			st.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForInconclusive, Wave: "canary", Message: "wave canary: noDisruption inconclusive"}
		}), want: []string{"Inconclusive", "tidegate.dev/receipt=r-inc"}},
		{name: "a refused source", refused: "GitRepository web refused the newest artifact",
			read: with(progressing, func(st *v1alpha1.FleetRolloutStatus) { st.Phase = v1alpha1.PhaseCompleted }),
			written: with(progressing, func(st *v1alpha1.FleetRolloutStatus) {
				st.Phase = v1alpha1.PhaseCompleted
				st.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForSource, Message: "GitRepository web refused the newest artifact"}
			}), want: []string{"SourceRefused"}},
		{name: "a source without an artifact is no refusal", written: with(progressing, func(st *v1alpha1.FleetRolloutStatus) {
			st.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForSource, Message: "GitRepository web has no artifact yet"}
		}), read: progressing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := phaseEvents(&tc.read, &tc.written, tc.refused)
			if len(tc.want) == 0 {
				if len(got) != 0 {
					t.Fatalf("got %+v, want no event", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("got %d events (%+v), want one %s", len(got), got, tc.want[0])
			}
			e := got[0]
			if e.reason != tc.want[0] {
				t.Errorf("reason %s, want %s", e.reason, tc.want[0])
			}
			for _, kv := range tc.want[1:] {
				k, v, _ := strings.Cut(kv, "=")
				if e.metadata[k] != v {
					t.Errorf("metadata %s = %q, want %q (%v)", k, e.metadata[k], v, e.metadata)
				}
				if k != "tidegate.dev/gate" && !strings.Contains(e.message, v) {
					t.Errorf("message %q does not name %s", e.message, v)
				}
			}
			if !strings.Contains(e.message, tc.wantMessage) {
				t.Errorf("message %q, want it to say %q", e.message, tc.wantMessage)
			}
		})
	}
}

// A wave switched in one pass is one event, however many clusters it has, naming at most
// maxEventClusters of them.
func TestAnnounceSwitchedIsOneEventPerWave(t *testing.T) {
	rec := fluxevents.NewFakeRecorder(10, false)
	r := &FleetRolloutReconciler{EventRecorder: rec}
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	var many []string
	for i := range 1000 {
		many = append(many, fmt.Sprintf("member-%04d", i))
	}
	r.announceSwitched(logr.Discard(), fr, map[waveRevision][]string{{"rest", "main@sha1:2"}: many, {"canary", "main@sha1:2"}: {"member-a"}})
	got := rec.GetEvents()
	if len(got) != 2 {
		t.Fatalf("got %d events, want one per wave: %v", len(got), got)
	}
	if !strings.Contains(got[0].Message, "switched 1 cluster of wave canary to revision main@sha1:2: member-a") {
		t.Errorf("canary's event: %q", got[0].Message)
	}
	rest := got[1]
	if rest.Reason != WaveSwitchedEventReason || !strings.Contains(rest.Message, "switched 1000 clusters of wave rest") ||
		!strings.HasSuffix(rest.Message, "member-0049 and 950 more") || strings.Contains(rest.Message, "member-0050") {
		t.Errorf("rest's event: %s %q", rest.Reason, rest.Message)
	}
	if c := rest.Annotations[metaClusters]; !strings.HasSuffix(c, "and 950 more") {
		t.Errorf("rest's clusters metadata: %q", c)
	}
}

// captured is a logger that keeps each line it is given, at info and above, as its message and
// its key-value pairs.
func captured() (logr.Logger, *[]string) {
	var lines []string
	return funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{}), &lines
}

// A transition of the rollout or of a wave is one info line, with the revision and, for a wave,
// its name and size; a pass that changes nothing logs nothing, and the waves of a new candidate
// are new, not moved on.
func TestTransitionsAreLoggedOnce(t *testing.T) {
	cand := &v1alpha1.RevisionStatus{Revision: "main@sha1:2"}
	read := &v1alpha1.FleetRolloutStatus{Phase: v1alpha1.PhaseProgressing, Candidate: cand, Waves: []v1alpha1.WaveStatus{
		{Name: "canary", Phase: v1alpha1.WaveSoaking, Clusters: []string{"a"}},
		{Name: "rest", Phase: v1alpha1.WavePending, Clusters: []string{"b", "c"}},
	}}
	written := read.DeepCopy()
	written.Phase = v1alpha1.PhaseRollingBack
	written.Waves[0].Phase = v1alpha1.WaveFailed
	written.WaitingFor = &v1alpha1.WaitingFor{Reason: v1alpha1.WaitingForRollback, Message: "noDisruption failed on canary"}

	log, lines := captured()
	logTransitions(log, read, written)
	want := []string{
		`"level"=0 "msg"="rollout phase changed" "from"="Progressing" "to"="RollingBack" "revision"="main@sha1:2" "reason"="RollingBack" "message"="noDisruption failed on canary"`,
		`"level"=0 "msg"="wave phase changed" "wave"="canary" "from"="Soaking" "to"="Failed" "revision"="main@sha1:2" "clusters"=1`,
	}
	if !slices.Equal(*lines, want) {
		t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(*lines, "\n"), strings.Join(want, "\n"))
	}

	log, lines = captured()
	logTransitions(log, written, written.DeepCopy())
	if len(*lines) != 0 {
		t.Errorf("a pass that changed nothing logged %q", *lines)
	}

	next := written.DeepCopy()
	next.Candidate = &v1alpha1.RevisionStatus{Revision: "main@sha1:3"}
	next.Phase = v1alpha1.PhaseProgressing
	next.Waves[0].Phase = v1alpha1.WaveProgressing
	next.Waves[1].Phase = v1alpha1.WavePending
	log, lines = captured()
	logTransitions(log, written, next)
	if len(*lines) != 3 || !strings.Contains((*lines)[2], `"wave"="rest" "from"="" "to"="Pending" "revision"="main@sha1:3"`) {
		t.Errorf("a new candidate's waves: %q", *lines)
	}
}

// A switch is one info line per wave, with its count, however many clusters it has.
func TestAnnounceSwitchedLogsOneLinePerWave(t *testing.T) {
	r := &FleetRolloutReconciler{EventRecorder: fluxevents.NewFakeRecorder(10, false)}
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	log, lines := captured()
	r.announceSwitched(log, fr, map[waveRevision][]string{{"rest", "main@sha1:2"}: {"b", "c", "d"}})
	want := []string{`"level"=0 "msg"="wave switched" "wave"="rest" "revision"="main@sha1:2" "clusters"=3`}
	if !slices.Equal(*lines, want) {
		t.Errorf("lines %q, want %q", *lines, want)
	}
}
