package simulator

import (
	"context"
	"testing"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// job is a one-pod check Job in ns running image, as tidegate creates them in a member.
func job(ns, name, image string) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr(int32(0)),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "check", Image: image}},
			}},
		},
	}
}

// jobCond returns j's condition of type t, or a zero condition.
func jobCond(j *batchv1.Job, t batchv1.JobConditionType) batchv1.JobCondition {
	for _, c := range j.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return batchv1.JobCondition{}
}

// waitFinished polls j until it has a terminal condition and returns whether it completed (else it failed).
func waitFinished(t *testing.T, j *batchv1.Job) bool {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		if err := memberClient.Get(context.Background(), client.ObjectKeyFromObject(j), j); err != nil {
			t.Fatalf("reading Job %s: %v", j.Name, err)
		}
		if jobFinished(j) {
			return jobCond(j, batchv1.JobComplete).Status == corev1.ConditionTrue
		}
		if time.Now().After(deadline) {
			t.Fatalf("Job %s never finished; status: %+v", j.Name, j.Status)
		}
		time.Sleep(interval / 2)
	}
}

// checkCompleted fails t unless j's status is what the Job controller writes for a Job whose one pod
// succeeded, which kstatus (kustomize-controller's health checks) also reads as Current.
func checkCompleted(t *testing.T, j *batchv1.Job) {
	t.Helper()
	st := j.Status
	for _, ct := range []batchv1.JobConditionType{batchv1.JobSuccessCriteriaMet, batchv1.JobComplete} {
		if c := jobCond(j, ct); c.Status != corev1.ConditionTrue || c.Reason != batchv1.JobReasonCompletionsReached {
			t.Errorf("Job %s: condition %s is %+v, want True with reason %s", j.Name, ct, c, batchv1.JobReasonCompletionsReached)
		}
	}
	if st.Succeeded != 1 || st.Failed != 0 || st.Active != 0 || st.StartTime == nil || st.CompletionTime == nil ||
		st.CompletionTime.Before(st.StartTime) {
		t.Errorf("Job %s completed with status %+v, want succeeded 1, none failed or active, startTime ≤ completionTime", j.Name, st)
	}
	if got := kstatusOf(t, j); got != status.CurrentStatus {
		t.Errorf("Job %s completed: kstatus %s, want Current", j.Name, got)
	}
}

// checkFailed is checkCompleted for a Job whose pod failed past its backoff limit of 0.
func checkFailed(t *testing.T, j *batchv1.Job) {
	t.Helper()
	st := j.Status
	for _, ct := range []batchv1.JobConditionType{batchv1.JobFailureTarget, batchv1.JobFailed} {
		if c := jobCond(j, ct); c.Status != corev1.ConditionTrue || c.Reason != batchv1.JobReasonBackoffLimitExceeded ||
			c.Message != messageBackoffLimitExceeded {
			t.Errorf("Job %s: condition %s is %+v, want True with reason %s", j.Name, ct, c, batchv1.JobReasonBackoffLimitExceeded)
		}
	}
	if c := jobCond(j, batchv1.JobComplete); c.Status == corev1.ConditionTrue {
		t.Errorf("Job %s failed but is Complete too", j.Name)
	}
	if st.Failed != 1 || st.Succeeded != 0 || st.Active != 0 || st.StartTime == nil || st.CompletionTime != nil {
		t.Errorf("Job %s failed with status %+v, want failed 1, none succeeded or active, a startTime, no completionTime", j.Name, st)
	}
	if got := kstatusOf(t, j); got != status.FailedStatus {
		t.Errorf("Job %s failed: kstatus %s, want Failed", j.Name, got)
	}
}

// checkLeftAlone fails t when a pass writes to finished Jobs, or when their resourceVersions move.
func checkLeftAlone(t *testing.T, s *Simulator, jobs ...*batchv1.Job) {
	t.Helper()
	rvs := map[string]string{}
	for _, j := range jobs {
		rvs[j.Name] = j.ResourceVersion
	}
	// Longer than a second: a time recomputed on every pass would show only once the clock crosses
	// into the next second, the API storing times to the second.
	time.Sleep(time.Second + 5*interval)
	if n, err := s.Sync(context.Background(), cluster); err != nil || n != 0 {
		t.Fatalf("Sync over finished Jobs wrote %d statuses (err %v), want 0", n, err)
	}
	for _, j := range jobs {
		if err := memberClient.Get(context.Background(), client.ObjectKeyFromObject(j), j); err != nil {
			t.Fatalf("reading Job %s: %v", j.Name, err)
		}
		if j.ResourceVersion != rvs[j.Name] {
			t.Errorf("finished Job %s was rewritten: resourceVersion %s → %s", j.Name, rvs[j.Name], j.ResourceVersion)
		}
	}
}

func TestOnAPIServerJobCompletesAndIsThenLeftAlone(t *testing.T) {
	s, ns := start(t)
	j := job(ns, "check", "probe:1")
	create(t, j)
	if !waitFinished(t, j) {
		t.Fatalf("Job failed with no fault: %+v", j.Status)
	}
	checkCompleted(t, j)

	// An Indexed Job of three completions succeeds with all its indexes, in the notation the API
	// server validates.
	indexed := job(ns, "indexed", "probe:1")
	indexed.Spec.CompletionMode = ptr(batchv1.IndexedCompletion)
	indexed.Spec.Completions, indexed.Spec.Parallelism = ptr(int32(3)), ptr(int32(3))
	create(t, indexed)
	if !waitFinished(t, indexed) {
		t.Fatalf("Indexed Job failed with no fault: %+v", indexed.Status)
	}
	if st := indexed.Status; st.Succeeded != 3 || st.CompletedIndexes != "0-2" || jobCond(indexed, batchv1.JobComplete).Status != corev1.ConditionTrue {
		t.Errorf("Indexed Job completed with status %+v, want Complete, succeeded 3, completedIndexes 0-2", st)
	}

	// Not even a fault set afterwards reopens them: a finished Job is the Job controller's no more.
	s.SetFault(cluster, Fault{Mode: FailJob})
	checkLeftAlone(t, s, j, indexed)
	checkCompleted(t, j)
}

func TestOnAPIServerFailJobFailsTheNamedJobOnly(t *testing.T) {
	s, ns := start(t)
	s.SetFault(cluster, Fault{Workload: ns + "/bad", Mode: FailJob})
	bad, good := job(ns, "bad", "probe:1"), job(ns, "good", "probe:1")
	create(t, bad)
	create(t, good)
	if waitFinished(t, bad) {
		t.Fatalf("Job named by a FailJob fault completed: %+v", bad.Status)
	}
	checkFailed(t, bad)
	if !waitFinished(t, good) {
		t.Fatalf("Job not named by the fault failed: %+v", good.Status)
	}
	checkCompleted(t, good)
	checkLeftAlone(t, s, bad, good)
}

// A FailJob fault limited by Image fails the check Job of the bad release only; a cluster-wide
// NeverAvailable fault, which crash-loops every workload, does not fail Jobs.
func TestOnAPIServerFailJobLimitedByImageAndWorkloadModesLeaveJobsAlone(t *testing.T) {
	s, ns := start(t)
	s.SetFault(cluster, Fault{Workload: "check-v2", Mode: FailJob, Image: ":v2"})
	s.SetFault(cluster, Fault{Workload: "check-v1", Mode: FailJob, Image: ":v2"})
	s.SetFault(cluster, Fault{Mode: NeverAvailable})
	v1, v2, other := job(ns, "check-v1", "probe:v1"), job(ns, "check-v2", "probe:v2"), job(ns, "other", "probe:v2")
	for _, j := range []*batchv1.Job{v1, v2, other} {
		create(t, j)
	}
	if waitFinished(t, v2) {
		t.Fatalf("Job of the matching image completed: %+v", v2.Status)
	}
	checkFailed(t, v2)
	for _, j := range []*batchv1.Job{v1, other} {
		if !waitFinished(t, j) {
			t.Fatalf("Job %s (image %s) failed: %+v", j.Name, j.Spec.Template.Spec.Containers[0].Image, j.Status)
		}
		checkCompleted(t, j)
	}
}

// The delay itself is counted on a fake clock (TestJobOutcome); here an hour's delay holds the Job
// running pass after pass, with no write once it has started, and ending it lets the Job complete.
func TestOnAPIServerSlowJobCompletesOnlyAfterTheDelay(t *testing.T) {
	s, ns := start(t)
	s.SetFault(cluster, Fault{Workload: ns + "/check", Mode: Slow, Delay: time.Hour})
	j := job(ns, "check", "probe:1")
	create(t, j)
	for range 3 {
		if _, err := s.Sync(context.Background(), cluster); err != nil {
			t.Fatalf("Sync: %v", err)
		}
	}
	if err := memberClient.Get(context.Background(), client.ObjectKeyFromObject(j), j); err != nil {
		t.Fatalf("reading the Job: %v", err)
	}
	if jobFinished(j) || j.Status.StartTime == nil || j.Status.Active != 1 {
		t.Fatalf("slow Job after 3 passes: %+v, want started, 1 active, not finished", j.Status)
	}
	if n, err := s.Sync(context.Background(), cluster); err != nil || n != 0 {
		t.Errorf("Sync over a running Job wrote %d statuses (err %v), want 0", n, err)
	}

	s.SetFault(cluster, Fault{Workload: ns + "/check", Mode: Slow}) // the delay is up
	if !waitFinished(t, j) {
		t.Fatalf("slow Job failed: %+v", j.Status)
	}
	checkCompleted(t, j)
}

// TestJobOutcome replays jobOutcome on a fake clock: a Job runs on the pass that first sees it and ends
// on a later one, Slow counting its delay from when the Job was first seen or the fault set, the later.
func TestJobOutcome(t *testing.T) {
	fault := func(m Mode, delay time.Duration, since time.Time) *activeFault {
		return &activeFault{Fault: Fault{Mode: m, Delay: delay}, since: since}
	}
	for _, c := range []struct {
		name  string
		f     *activeFault
		after time.Duration
		want  jobOutcome
	}{
		{"first seen, no fault", nil, 0, jobRunning},
		{"next pass, no fault", nil, interval, jobCompleted},
		{"first seen, FailJob", fault(FailJob, 0, t0), 0, jobRunning},
		{"next pass, FailJob", fault(FailJob, 0, t0), interval, jobFailed},
		{"NeverAvailable", fault(NeverAvailable, 0, t0), interval, jobCompleted},
		{"LoseAvailability", fault(LoseAvailability, 0, t0), interval, jobCompleted},
		{"errors only", &activeFault{Fault: Fault{ErrorRatio: 1}, since: t0}, interval, jobCompleted},
		{"Slow, within the delay", fault(Slow, 20*time.Second, t0), 19 * time.Second, jobRunning},
		{"Slow, delay up", fault(Slow, 20*time.Second, t0), 20 * time.Second, jobCompleted},
		{"Slow set after first seen, counted from it", fault(Slow, 20*time.Second, t0.Add(10*time.Second)), 29 * time.Second, jobRunning},
		{"Slow set after first seen, delay up", fault(Slow, 20*time.Second, t0.Add(10*time.Second)), 30 * time.Second, jobCompleted},
		{"Slow without delay", fault(Slow, 0, t0), interval, jobCompleted},
	} {
		tr := &tracked{firstSeen: t0}
		if got := tr.jobOutcome(c.f, t0.Add(c.after)); got != c.want {
			t.Errorf("%s: outcome %d, want %d", c.name, got, c.want)
		}
	}
}

func TestAllIndexes(t *testing.T) {
	for n, want := range map[int32]string{0: "", 1: "0", 2: "0,1", 3: "0-2", 10: "0-9"} {
		if got := allIndexes(n); got != want {
			t.Errorf("allIndexes(%d) = %q, want %q", n, got, want)
		}
	}
}
