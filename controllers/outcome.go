package controllers

import (
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// intentRequeue is how soon the engine comes back after recording an intent, to act on it: the
// status that asks for the write is persisted first, so a crash between the two repeats the write,
// never the decision.
const intentRequeue = 200 * time.Millisecond

// outcomeKind says what should happen after a pass, in the manner of source-controller's typed
// results: a stalling pass needs the user, a waiting one comes back at a time, a generic error is
// retried with backoff, and a recorded intent is acted on at once.
type outcomeKind int

const (
	// proceed lets the pipeline go on to its next sub-step.
	proceed outcomeKind = iota
	// done ends the pass; come back after `after`.
	done
	// waiting ends the pass on something outside tidegate (a source, the cluster inventory):
	// Ready says why, and the pass is repeated after `after` or when a watched object changes.
	waiting
	// next ends a pass that recorded an intent in status: the next pass acts on it.
	next
	// stalling ends the pass on something only the user can fix (an invalid spec or policy).
	stalling
	// generic ends the pass on a transient error, retried with backoff.
	generic
)

// outcome is what a sub-step of the reconcile pipeline returns.
type outcome struct {
	kind outcomeKind
	// reason and message say why for waiting and stalling outcomes (Ready's reason and message).
	reason, message string
	// after is when to come back; zero for stalling means never by itself (the spec must change).
	after time.Duration
	err   error
}

func proceeding() outcome                   { return outcome{} }
func doneAfter(after time.Duration) outcome { return outcome{kind: done, after: after} }
func actNext() outcome                      { return outcome{kind: next} }
func retryable(err error) outcome           { return outcome{kind: generic, err: err} }

func waitingOn(reason, message string, after time.Duration) outcome {
	return outcome{kind: waiting, reason: reason, message: capMessage(message), after: after}
}

// stalled is an outcome only the user can fix; after > 0 looks again then all the same (a policy's
// source changes without a watch event when its artifact is garbage-collected and rebuilt).
func stalled(reason string, err error, after time.Duration) outcome {
	return outcome{kind: stalling, reason: reason, message: capMessage(err.Error()), after: after, err: err}
}

// result maps an outcome to what controller-runtime does next; the one place that does.
func (o outcome) result() (ctrl.Result, error) {
	switch o.kind {
	case next:
		return ctrl.Result{RequeueAfter: intentRequeue}, nil
	case stalling:
		if o.after > 0 {
			return ctrl.Result{RequeueAfter: o.after}, nil
		}
		return ctrl.Result{}, reconcile.TerminalError(o.err)
	case generic:
		return ctrl.Result{}, o.err
	}
	return ctrl.Result{RequeueAfter: o.after}, nil
}
