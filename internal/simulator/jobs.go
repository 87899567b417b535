package simulator

import (
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The messages the Job controller writes with its reasons (pkg/controller/job in k8s.io/kubernetes), so
// that whoever reads a simulated Job (tidegate's check evidence, people) sees what a real cluster shows.
const (
	messageCompletionsReached   = "Reached expected number of succeeded pods"
	messageBackoffLimitExceeded = "Job has reached the specified backoff limit"
)

// jobOutcome is where a Job stands after a pass.
type jobOutcome int

const (
	jobRunning jobOutcome = iota
	jobCompleted
	jobFailed
)

// jobs finishes the Jobs of w's member the way the Job controller and kubelets would under the
// cluster's faults, and returns every Job it listed (the CronJobs' status reads them). A Job runs (its
// pod starts) on the pass that first sees it and ends on a later one, so anyone watching sees it start
// before it ends.
func (s *Simulator) jobs(w *writes, seen map[string]bool, now time.Time) []batchv1.Job {
	var jobs batchv1.JobList
	w.list("Jobs", &jobs)
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if j.DeletionTimestamp != nil || !runsHere(j) || jobFinished(j) {
			continue
		}
		t := w.m.track("Job", j, seen, now, false)
		st := jobStatus(j, t.jobOutcome(s.jobFault(w.m.name, j), now), now)
		changed := !equality.Semantic.DeepEqual(j.Status, st)
		j.Status = st
		w.status("Job", j, changed)
	}
	return jobs.Items
}

// jobFault is the fault that applies to Job j on cluster: one set for the Job itself, else one set
// for the CronJob that created it (a fault on "backup" fails every Job its CronJob starts), else the
// cluster-wide one.
func (s *Simulator) jobFault(cluster string, j *batchv1.Job) *activeFault {
	imgs := images(j.Spec.Template.Spec)
	names := []string{j.Name}
	if owner := metav1.GetControllerOf(j); owner != nil && owner.Kind == "CronJob" {
		names = append(names, owner.Name)
	}
	return s.faultForAny(cluster, j.Namespace, names, imgs)
}

// runsHere says whether the Job controller of the cluster would run pods for j: not when j is suspended or
// runs no pods at once (parallelism 0), nor when another controller manages it (spec.managedBy).
func runsHere(j *batchv1.Job) bool {
	if j.Spec.ManagedBy != nil && *j.Spec.ManagedBy != batchv1.JobControllerName {
		return false
	}
	return !deref(j.Spec.Suspend, false) && deref(j.Spec.Parallelism, 1) > 0
}

// jobFinished says whether j has a terminal condition (Complete or Failed True): the Job controller never
// touches such a Job again, and neither does the simulator.
func jobFinished(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// jobOutcome decides where the Job tracked by t stands at now under fault f (nil: none). It runs on the
// pass that first sees it; from the next one on it fails under FailJob, completes Delay after it was
// first seen (or after SetFault, whichever is later) under Slow, and completes at once otherwise: the
// workloads' modes (NeverAvailable, LoseAvailability) are about pods that serve, not pods that finish.
func (t *tracked) jobOutcome(f *activeFault, now time.Time) jobOutcome {
	if !now.After(t.firstSeen) {
		return jobRunning
	}
	if f != nil {
		switch f.Mode {
		case FailJob:
			return jobFailed
		case Slow:
			if now.Before(later(t.firstSeen, f.since).Add(f.Delay)) {
				return jobRunning
			}
		}
	}
	return jobCompleted
}

// jobStatus is the status of j once the Job controller and kubelets have acted on o, written the way the
// Job controller writes it so that the API server's validation of Job status accepts it: a finished Job
// has a startTime, no active, ready or terminating pods and no uncounted ones; Complete comes with
// SuccessCriteriaMet and a completionTime, Failed with FailureTarget and none. Both interim conditions
// and the terminal one go in one write, where the controller makes two; the API server accepts either.
func jobStatus(j *batchv1.Job, o jobOutcome, now time.Time) batchv1.JobStatus {
	// The API stores times to the second; a finer time would differ from its stored self on the next pass.
	ts := metav1.NewTime(now.Truncate(time.Second))
	old := j.Status
	completions := deref(j.Spec.Completions, 1)
	st := batchv1.JobStatus{
		// startTime cannot change once set on a running Job, whoever set it.
		StartTime:               old.StartTime,
		Active:                  min(deref(j.Spec.Parallelism, 1), completions),
		Ready:                   new(int32),
		Terminating:             new(int32),
		UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{},
		Succeeded:               old.Succeeded,
		Failed:                  old.Failed,
		CompletedIndexes:        old.CompletedIndexes,
		FailedIndexes:           old.FailedIndexes,
		Conditions:              old.Conditions,
	}
	if st.StartTime == nil {
		st.StartTime = &ts
	}
	var finished []batchv1.JobCondition
	switch o {
	case jobCompleted:
		st.Succeeded = completions
		if deref(j.Spec.CompletionMode, batchv1.NonIndexedCompletion) == batchv1.IndexedCompletion {
			st.CompletedIndexes = allIndexes(completions)
		}
		st.CompletionTime = &ts
		finished = []batchv1.JobCondition{
			jobCondition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached, messageCompletionsReached, ts),
			jobCondition(batchv1.JobComplete, batchv1.JobReasonCompletionsReached, messageCompletionsReached, ts),
		}
	case jobFailed:
		// The backoff limit is exceeded once one more pod than it allows has failed.
		st.Failed = deref(j.Spec.BackoffLimit, 6) + 1
		finished = []batchv1.JobCondition{
			jobCondition(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded, messageBackoffLimitExceeded, ts),
			jobCondition(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded, messageBackoffLimitExceeded, ts),
		}
	}
	if finished != nil {
		st.Active = 0
		st.Conditions = append(append([]batchv1.JobCondition{}, old.Conditions...), finished...)
	}
	return st
}

func jobCondition(t batchv1.JobConditionType, reason, message string, ts metav1.Time) batchv1.JobCondition {
	return batchv1.JobCondition{
		Type: t, Status: corev1.ConditionTrue, Reason: reason, Message: message, LastProbeTime: ts, LastTransitionTime: ts,
	}
}

// allIndexes is status.completedIndexes of an Indexed Job whose n indexes all succeeded, in the Job
// controller's notation ("0", "0,1", "0-4").
func allIndexes(n int32) string {
	switch n {
	case 0:
		return ""
	case 1:
		return "0"
	case 2:
		return "0,1"
	}
	return "0-" + strconv.Itoa(int(n-1))
}

// deref is *p, or def when p is nil (the API's default for an optional field).
func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}
