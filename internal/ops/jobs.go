package ops

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// FieldManager is the field manager of every write the entry paths make; the controller's is
// v1alpha1.FieldManager ("tidegate").
const FieldManager = "tidegate-cli"

// Revision is a revision and its artifact's digest.
type Revision struct {
	Revision string `json:"revision"`
	Digest   string `json:"digest,omitempty"`
}

func revisionOf(r *v1alpha1.RevisionStatus) *Revision {
	if r == nil {
		return nil
	}
	return &Revision{Revision: r.Revision, Digest: r.Digest}
}

// Job is the handle of a write: which rollout (its uid, so a rollout deleted and created again
// under the same name is not mistaken for it), the generation the write produced, the reconcile
// request it made (annotation writes do not change the generation), and the candidate it was made
// against.
type Job struct {
	Rollout          Ref       `json:"rollout"`
	UID              types.UID `json:"uid"`
	Generation       int64     `json:"generation"`
	ReconcileRequest string    `json:"reconcileRequest,omitempty"`
	Candidate        *Revision `json:"candidate,omitempty"`
}

// Job states.
const (
	// JobPending: the controller has not yet acted on the write (observedGeneration, or the
	// reconcile request, not reached).
	JobPending = "Pending"
	// JobRunning: acted on; the rollout is moving (Progressing, RollingBack).
	JobRunning = "Running"
	// JobAwaitingApproval: paused until someone approves a wave (status.waitingFor names it).
	JobAwaitingApproval = "AwaitingApproval"
	// JobSettled: acted on, and the rollout reached a phase it stays in by itself (Idle,
	// Completed, Held, RolledBack) or is suspended.
	JobSettled = "Settled"
	// JobGone: the rollout was deleted, or replaced by another of the same name.
	JobGone = "Gone"
)

// JobStatus is where a job stands.
type JobStatus struct {
	Job                Job         `json:"job"`
	State              string      `json:"state"`
	Phase              string      `json:"phase,omitempty"`
	ObservedGeneration int64       `json:"observedGeneration"`
	Candidate          *Revision   `json:"candidate,omitempty"`
	KnownGood          *Revision   `json:"knownGood,omitempty"`
	Ready              Condition   `json:"ready"`
	WaitingFor         *WaitingFor `json:"waitingFor,omitempty"`
}

// Condition is a condition's status, reason and message.
type Condition struct {
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// WaitingFor is what the rollout waits for, from status.waitingFor.
type WaitingFor struct {
	Reason  string `json:"reason"`
	Wave    string `json:"wave,omitempty"`
	Message string `json:"message,omitempty"`
}

// Done tells whether the job will not change state by itself any more: settled or gone. An
// approval pause is not done, but nothing but an approval moves it.
func (s JobStatus) Done() bool { return s.State == JobSettled || s.State == JobGone }

// Apply reads rollout ns/name, applies m and writes what changed as a JSON merge patch of the
// rollout (never of its status) with field manager FieldManager. The patch carries the
// resourceVersion read, so a concurrent change makes it fail with a conflict; it is then read and
// applied again. It returns the rollout as written (or read, when nothing changed), the change and
// the job that follows it.
func Apply(ctx context.Context, c client.Client, ns, name string, m Mutation) (*v1alpha1.FleetRollout, Change, Job, error) {
	ref := RolloutRef(ns, name)
	var (
		fr *v1alpha1.FleetRollout
		ch Change
	)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		fr = &v1alpha1.FleetRollout{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, fr); err != nil {
			return err
		}
		before := fr.DeepCopy()
		var err error
		if ch, err = m(fr); err != nil || !ch.Changed {
			return err
		}
		return c.Patch(ctx, fr, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager))
	})
	if err != nil {
		return nil, Change{}, Job{}, AsError(err, ref)
	}
	return fr, ch, JobOf(fr), nil
}

// JobOf is the job of the write that produced fr.
func JobOf(fr *v1alpha1.FleetRollout) Job {
	j := Job{Rollout: RolloutRef(fr.Namespace, fr.Name), UID: fr.UID, Generation: fr.Generation, Candidate: revisionOf(fr.Status.Candidate)}
	if v, ok := fr.Annotations[meta.ReconcileRequestAnnotation]; ok && v != fr.Status.LastHandledReconcileAt {
		j.ReconcileRequest = v
	}
	return j
}

// StatusOf is where job stands given the rollout as read now (nil when it does not exist).
func StatusOf(job Job, fr *v1alpha1.FleetRollout) JobStatus {
	s := JobStatus{Job: job}
	if fr == nil || fr.UID != job.UID {
		s.State = JobGone
		return s
	}
	s.Phase, s.ObservedGeneration = fr.Status.Phase, fr.Status.ObservedGeneration
	s.Candidate, s.KnownGood = revisionOf(fr.Status.Candidate), revisionOf(fr.Status.LastKnownGood)
	s.Ready = Condition{Status: "Unknown"}
	if c := apimeta.FindStatusCondition(fr.Status.Conditions, v1alpha1.ReadyCondition); c != nil {
		s.Ready = Condition{Status: string(c.Status), Reason: c.Reason, Message: c.Message}
	}
	if w := fr.Status.WaitingFor; w != nil {
		s.WaitingFor = &WaitingFor{Reason: w.Reason, Wave: w.Wave, Message: w.Message}
	}
	observed := fr.Status.ObservedGeneration >= job.Generation &&
		(job.ReconcileRequest == "" || fr.Status.LastHandledReconcileAt == job.ReconcileRequest)
	switch {
	case fr.Spec.Suspend:
		// The controller writes nothing for a suspended rollout: what it shows is all there will be.
		s.State = JobSettled
	case !observed:
		s.State = JobPending
	case s.WaitingFor != nil && s.WaitingFor.Reason == v1alpha1.WaitingForApproval:
		s.State = JobAwaitingApproval
	case s.Phase == v1alpha1.PhaseProgressing || s.Phase == v1alpha1.PhaseRollingBack || s.Phase == "":
		s.State = JobRunning
	default:
		s.State = JobSettled
	}
	return s
}

// Status reads the rollout of job and says where the job stands.
func Status(ctx context.Context, c client.Client, job Job) (JobStatus, error) {
	fr := &v1alpha1.FleetRollout{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: job.Rollout.Namespace, Name: job.Rollout.Name}, fr); err != nil {
		if e := AsError(err, job.Rollout); e.Code == CodeNotFound {
			return StatusOf(job, nil), nil
		} else {
			return JobStatus{Job: job}, e
		}
	}
	return StatusOf(job, fr), nil
}

// Follow polls job every poll until it is done or paused for an approval, calling progress with
// every status that differs from the one before; when ctx ends first it returns the last status
// and a CodeTimeout error.
func Follow(ctx context.Context, c client.Client, job Job, poll time.Duration, progress func(JobStatus)) (JobStatus, error) {
	var last JobStatus
	for first := true; ; first = false {
		s, err := Status(ctx, c, job)
		if err != nil && !PastDeadline(ctx, err) {
			return s, err
		}
		if err == nil {
			if progress != nil && (first || !sameStatus(s, last)) {
				progress(s)
			}
			last = s
			if s.Done() || s.State == JobAwaitingApproval {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			if last.State == "" {
				return last, Errorf(CodeTimeout, &job.Rollout, "%s: the job's status could not be read before the deadline: %v", job.Rollout, ctx.Err())
			}
			return last, Errorf(CodeTimeout, &job.Rollout, "%s: the job is still %s (phase %s): %v", job.Rollout, last.State, OrDash(last.Phase), ctx.Err())
		case <-time.After(poll):
		}
	}
}

// PastDeadline tells whether err comes from ctx's deadline: ctx ended, or client-go's rate limiter
// refused to wait past it ("would exceed context deadline", which wraps no context error).
func PastDeadline(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "would exceed context deadline")
}

func sameStatus(a, b JobStatus) bool {
	return a.State == b.State && a.Phase == b.Phase && a.ObservedGeneration == b.ObservedGeneration && a.Ready == b.Ready &&
		(a.WaitingFor == nil) == (b.WaitingFor == nil) && (a.WaitingFor == nil || *a.WaitingFor == *b.WaitingFor)
}

// Cancel modes.
const (
	// CancelHold holds the rollout where it is: always possible, nothing is undone.
	CancelHold = "hold"
	// CancelRollback takes the fleet back to the known-good revision.
	CancelRollback = "rollback"
)

// Cancel cancels job the way mode says, or says with CodeCannotCancel why it cannot: a rollback
// is already under way (it cannot be held or rolled back further), there is no known-good to go
// back to, or the rollout is not where a rollback acts.
func Cancel(ctx context.Context, c client.Client, job Job, mode, reason string, now time.Time) (Change, Job, error) {
	st, err := Status(ctx, c, job)
	if err != nil {
		return Change{}, Job{}, err
	}
	ref := &job.Rollout
	switch {
	case st.State == JobGone:
		return Change{}, Job{}, Errorf(CodeCannotCancel, ref, "%s is gone (deleted, or replaced by another of the same name): there is nothing to cancel", job.Rollout)
	case st.Phase == v1alpha1.PhaseRollingBack:
		return Change{}, Job{}, Errorf(CodeCannotCancel, ref, "%s is rolling back: a rollback under way is not stopped or held; it finishes within spec.rollback.timeout", job.Rollout)
	}
	var m Mutation
	switch mode {
	case CancelHold:
		if reason == "" {
			reason = "job cancelled"
		}
		m = Hold(reason)
	case CancelRollback:
		switch {
		case st.KnownGood == nil:
			return Change{}, Job{}, Errorf(CodeCannotCancel, ref, "%s has no known-good revision to go back to; hold it instead", job.Rollout)
		case st.Phase != v1alpha1.PhaseProgressing && st.Phase != v1alpha1.PhaseHeld:
			return Change{}, Job{}, Errorf(CodeCannotCancel, ref, "%s is %s: a rollback acts only while it is Progressing or Held", job.Rollout, OrDash(st.Phase))
		}
		m = Rollback(now)
	default:
		return Change{}, Job{}, Errorf(CodeInvalid, ref, "unknown cancel mode %q: use %s or %s", mode, CancelHold, CancelRollback)
	}
	_, ch, next, err := Apply(ctx, c, job.Rollout.Namespace, job.Rollout.Name, m)
	return ch, next, err
}
