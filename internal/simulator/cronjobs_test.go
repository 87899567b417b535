package simulator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// cronJob is a nightly backup CronJob in ns whose Jobs run one pod of image.
func cronJob(ns, image string) *batchv1.CronJob {
	tpl := job(ns, "", image)
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "backup", Namespace: ns},
		Spec: batchv1.CronJobSpec{
			Schedule: "0 3 * * *",
			JobTemplate: batchv1.JobTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "backup"}, Annotations: map[string]string{"team": "db"}},
				Spec:       tpl.Spec,
			},
		},
	}
}

// The Job made from a CronJob is kubectl's: the template's spec, labels and annotations, marked as
// made by hand, controlled by the CronJob; kstatus reads the CronJob Current, and its Job Current
// once it completed. The CronJob's lastSuccessfulTime is its latest completed Job's.
func TestJobFromCronJobIsKubectls(t *testing.T) {
	cj := cronJob("demo", "backup:1")
	cj.UID = "cj-uid"
	if got := kstatusOf(t, cj); got != status.CurrentStatus {
		t.Errorf("CronJob kstatus %s, want Current", got)
	}
	j := jobFromCronJob(cj, "")
	owner := metav1.GetControllerOf(j)
	if j.GenerateName != "backup-manual-" || j.Namespace != "demo" || j.Labels["app"] != "backup" ||
		j.Annotations["team"] != "db" || j.Annotations[annotationInstantiate] != "manual" ||
		owner == nil || owner.Kind != "CronJob" || owner.UID != "cj-uid" || j.Spec.Template.Spec.Containers[0].Image != "backup:1" {
		t.Fatalf("Job from CronJob: %+v", j)
	}
	if named := jobFromCronJob(cj, "backup-now"); named.Name != "backup-now" || named.GenerateName != "" {
		t.Errorf("a named Job is %q (generateName %q), want backup-now", named.Name, named.GenerateName)
	}

	j.Name, j.UID, j.Generation = "backup-1", "j-uid", 1
	j.Status = roundTrip(t, jobStatus(j, jobCompleted, t0))
	if got := kstatusOf(t, j); got != status.CurrentStatus {
		t.Errorf("completed Job of the CronJob: kstatus %s, want Current", got)
	}
	later := j.DeepCopy()
	later.Status = roundTrip(t, jobStatus(later, jobCompleted, t0.Add(time.Hour)))
	failed := j.DeepCopy()
	failed.Status = roundTrip(t, jobStatus(failed, jobFailed, t0.Add(2*time.Hour)))
	other := later.DeepCopy()
	other.OwnerReferences = nil
	other.Status = roundTrip(t, jobStatus(other, jobCompleted, t0.Add(3*time.Hour)))
	st := cronJobStatus(cj, []batchv1.Job{*j, *later, *failed, *other})
	if st.LastSuccessfulTime == nil || !st.LastSuccessfulTime.Time.Equal(t0.Add(time.Hour)) {
		t.Errorf("lastSuccessfulTime %v, want the latest completion of its own Jobs, %v", st.LastSuccessfulTime, t0.Add(time.Hour))
	}
}

// A triggered CronJob's Job runs and completes, and the CronJob records its success; a FailJob fault
// set for the CronJob fails the next one it starts.
func TestOnAPIServerTriggeredCronJobRunsItsJob(t *testing.T) {
	s, ns := start(t)
	cj := cronJob(ns, "backup:1")
	create(t, cj)
	if _, err := s.TriggerCronJob(context.Background(), "member-9", ns, "backup", ""); err == nil {
		t.Errorf("TriggerCronJob on an unknown cluster succeeded")
	}
	if _, err := s.TriggerCronJob(context.Background(), cluster, ns, "none", ""); err == nil {
		t.Errorf("TriggerCronJob of a CronJob that does not exist succeeded")
	}

	j, err := s.TriggerCronJob(context.Background(), cluster, ns, "backup", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(j.Name, "backup-manual-") {
		t.Errorf("triggered Job named %q, want backup-manual-…", j.Name)
	}
	if !waitFinished(t, j) {
		t.Fatalf("the triggered Job failed with no fault: %+v", j.Status)
	}
	checkCompleted(t, j)
	waitUntil(t, cj, "its success recorded", func(status.Status) bool { return cj.Status.LastSuccessfulTime != nil })
	if !cj.Status.LastSuccessfulTime.Equal(j.Status.CompletionTime) {
		t.Errorf("CronJob lastSuccessfulTime %v, want its Job's completion %v", cj.Status.LastSuccessfulTime, j.Status.CompletionTime)
	}

	s.SetFault(cluster, Fault{Workload: ns + "/backup", Mode: FailJob})
	bad, err := s.TriggerCronJob(context.Background(), cluster, ns, "backup", "backup-bad")
	if err != nil {
		t.Fatal(err)
	}
	if waitFinished(t, bad) {
		t.Fatalf("the Job of a CronJob under FailJob completed: %+v", bad.Status)
	}
	checkFailed(t, bad)

	var jobs batchv1.JobList
	if err := memberClient.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 2 {
		t.Errorf("%d Jobs in the namespace, want the 2 triggered", len(jobs.Items))
	}
}
