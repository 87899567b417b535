package simulator

import (
	"context"
	"fmt"
	"maps"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A CronJob's Jobs start only when asked (TriggerCronJob), never by its schedule: a rollout's waves
// are judged in seconds to minutes, a schedule fires every few minutes to once a day, and a Job that
// turns up on a schedule of its own would make a test's or the sandbox's story depend on the minute
// it runs in. Asked, the Job runs and ends as every Job does (jobs.go), under the faults set for it or
// for its CronJob.

// annotationInstantiate marks a Job made from a CronJob by hand, as `kubectl create job --from=cronjob/X`
// marks it.
const annotationInstantiate = "cronjob.kubernetes.io/instantiate"

// TriggerCronJob starts a Job of the CronJob namespace/name on cluster now, from its jobTemplate,
// as `kubectl create job NAME --from=cronjob/name` does: the template's labels and annotations, the
// annotation cronjob.kubernetes.io/instantiate=manual, and the CronJob as its controller. job names
// the Job; "" has the API server make a name from "<cronjob>-manual-". It returns the Job created;
// the simulator runs it from its next pass.
func (s *Simulator) TriggerCronJob(ctx context.Context, cluster, namespace, name, job string) (*batchv1.Job, error) {
	m, ok := s.members[cluster]
	if !ok {
		return nil, fmt.Errorf("simulator has no member cluster %q (known: %v)", cluster, s.Clusters())
	}
	var cj batchv1.CronJob
	if err := m.client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &cj); err != nil {
		return nil, fmt.Errorf("reading CronJob %s/%s on cluster %s: %w", namespace, name, cluster, err)
	}
	j := jobFromCronJob(&cj, job)
	if err := m.client.Create(ctx, j); err != nil {
		return nil, fmt.Errorf("creating a Job of CronJob %s/%s on cluster %s: %w", namespace, name, cluster, err)
	}
	return j, nil
}

// jobFromCronJob is the Job kubectl makes from cj (pkg/cmd/create/create_job.go in k8s.io/kubectl),
// named name, or named by the API server when name is "".
func jobFromCronJob(cj *batchv1.CronJob, name string) *batchv1.Job {
	annotations := map[string]string{annotationInstantiate: "manual"}
	maps.Copy(annotations, cj.Spec.JobTemplate.Annotations)
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   cj.Namespace,
			Labels:      maps.Clone(cj.Spec.JobTemplate.Labels),
			Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: batchv1.SchemeGroupVersion.String(), Kind: "CronJob", Name: cj.Name, UID: cj.UID,
				Controller: ptrTo(true),
			}},
		},
		Spec: *cj.Spec.JobTemplate.Spec.DeepCopy(),
	}
	if name == "" {
		j.GenerateName = cj.Name + "-manual-"
	}
	return j
}

// cronJobs writes the status of w's member's CronJobs from their Jobs (jobs, every Job of the cluster),
// as the CronJob controller does for Jobs it did not start itself: lastSuccessfulTime is the latest
// completion of a Job it controls. It starts none (see above), so lastScheduleTime and active stay
// as they are.
func (s *Simulator) cronJobs(w *writes, jobs []batchv1.Job) {
	var cjs batchv1.CronJobList
	if !w.list("CronJobs", &cjs) {
		return
	}
	for i := range cjs.Items {
		cj := &cjs.Items[i]
		if cj.DeletionTimestamp != nil {
			continue
		}
		st := cronJobStatus(cj, jobs)
		changed := !equality.Semantic.DeepEqual(cj.Status, st)
		cj.Status = st
		w.status("CronJob", cj, changed)
	}
}

// cronJobStatus is cj's status once the CronJob controller has seen jobs.
func cronJobStatus(cj *batchv1.CronJob, jobs []batchv1.Job) batchv1.CronJobStatus {
	st := *cj.Status.DeepCopy()
	for i := range jobs {
		j := &jobs[i]
		owner := metav1.GetControllerOf(j)
		if owner == nil || owner.UID != cj.UID || j.Status.CompletionTime == nil || !jobFinished(j) {
			continue
		}
		if st.LastSuccessfulTime == nil || j.Status.CompletionTime.After(st.LastSuccessfulTime.Time) {
			st.LastSuccessfulTime = j.Status.CompletionTime.DeepCopy()
		}
	}
	return st
}

// ptrTo returns a pointer to v.
func ptrTo[T any](v T) *T { return &v }
