package collector

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/engine"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/verdict"
)

// checksParallel bounds the members whose checks are run or read at once.
const checksParallel = 16

// Bounds of what a check's evidence keeps of a failed Job's logs.
const (
	checkLogLines = 20
	checkLogBytes = 2048
)

// CheckLabel names, on a check's Job, the check it runs.
const CheckLabel = "tidegate.dev/check"

// functionalChecks runs the policy's checks that apply to wave wv (settings.checks) on its members,
// or the first sample of them by name, and records each run in ev: Passed or Failed with its
// message (and a failed Job's logs' tail), or, when it could not run or has not finished, unset
// and the cluster unobserved. A Job is created once per candidate, wave and cluster, and read at
// every decision until it finishes; an HTTP check is asked at each decision.
func (c *Collector) functionalChecks(ctx context.Context, w *engine.World, wv *v1alpha1.WaveStatus, ev *verdict.NoDisruptionEvidence) {
	var failed []string
	for _, name := range slices.Sorted(maps.Keys(w.Settings.Checks)) {
		chk := w.Settings.Checks[name]
		if !chk.AppliesTo(wv.Name) {
			continue
		}
		run := checkSample(ev, chk.Sample)
		results := make([]checkRun, len(run))
		at := candidateCheck(w.Rollout, wv.Name)
		evidence.Each(len(run), checksParallel, func(j int) {
			results[j] = c.runCheck(ctx, w, at, name, chk, ev.Clusters[run[j]].Name)
		})
		for j, i := range run {
			cc, r := &ev.Clusters[i], results[j]
			if r.couldNotRun != "" {
				cc.Unset = append(cc.Unset, verdict.MeasureCheck(name))
				slices.Sort(cc.Unset)
				ev.Unobserved = append(ev.Unobserved, verdict.Unobserved{Name: cc.Name, Reason: "check " + name + ": " + r.couldNotRun})
				continue
			}
			if cc.Checks == nil {
				cc.Checks = map[string]verdict.CheckResult{}
			}
			cc.Checks[name] = r.result
			if r.result.Result == verdict.CheckFailed {
				failed = append(failed, cc.Name+" ("+name+")")
			}
		}
		if len(run) < len(ev.Clusters) {
			ev.Limits = append(ev.Limits, fmt.Sprintf("check %s ran on %d of the wave's %d clusters (settings.checks.%s.sample)", name, len(run), len(ev.Clusters), name))
		}
	}
	if len(failed) > 0 {
		ev.Limits = append(ev.Limits, fmt.Sprintf("checks failed on %s", firstOf(failed)))
	}
}

// checkSample is the indexes in ev.Clusters of the clusters a check runs on: the first n by name, or
// every one when n is 0.
func checkSample(ev *verdict.NoDisruptionEvidence, n int) []int {
	idx := make([]int, len(ev.Clusters))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return strings.Compare(ev.Clusters[a].Name, ev.Clusters[b].Name) })
	if n > 0 && n < len(idx) {
		idx = idx[:n]
	}
	slices.Sort(idx)
	return idx
}

// checkRun is one check's run on one cluster: its result, or why it could not run (yet).
type checkRun struct {
	result      verdict.CheckResult
	couldNotRun string
}

// checkAt is the revision a check runs against: the candidate after a wave's switch, or the
// known-good in a rehearsal's way back. key tells its Jobs apart.
type checkAt struct {
	key, revision, wave string
}

func candidateCheck(fr *v1alpha1.FleetRollout, wave string) checkAt {
	return checkAt{key: fr.Status.Candidate.Key(), revision: fr.Status.Candidate.Revision, wave: wave}
}

func rehearsalCheck(fr *v1alpha1.FleetRollout, wave string) checkAt {
	return checkAt{key: "rehearsal/" + fr.Status.LastKnownGood.Key() + "/" + fr.Status.Candidate.Key(), revision: fr.Status.LastKnownGood.Revision, wave: wave}
}

// rollbackCheck is a check of a real rollback's way back, at the known-good: its Jobs are other
// than the rehearsal's for the same candidate.
func rollbackCheck(fr *v1alpha1.FleetRollout, wave string) checkAt {
	return checkAt{key: "rollback/" + fr.Status.LastKnownGood.Key() + "/" + fr.Status.Candidate.Key(), revision: fr.Status.LastKnownGood.Revision, wave: wave}
}

func (c *Collector) runCheck(ctx context.Context, w *engine.World, at checkAt, name string, chk verdict.CheckSettings, cluster string) checkRun {
	timeout, _ := time.ParseDuration(chk.Timeout) // Settings checked it
	if chk.HTTP != nil {
		return httpCheck(ctx, chk.HTTP, cluster, timeout)
	}
	fc := w.Clusters[cluster]
	if fc == nil {
		return checkRun{couldNotRun: "its FleetCluster is gone"}
	}
	return c.jobCheck(ctx, w.Rollout, at, fc, name, chk.Job, timeout)
}

// httpCheck asks the check's URL, for cluster, from the hub. A request that got no answer could not
// run the check (the gate is Inconclusive); an answer other than the one expected fails it.
func httpCheck(ctx context.Context, h *verdict.HTTPCheck, cluster string, timeout time.Duration) checkRun {
	url := strings.ReplaceAll(h.URL, "{{cluster}}", cluster)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return checkRun{couldNotRun: fmt.Sprintf("GET %s: %v", url, err)}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return checkRun{couldNotRun: fmt.Sprintf("GET %s got no answer: %v", url, redactURLError(err))}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	switch {
	case resp.StatusCode != h.Status:
		return checkRun{result: verdict.CheckResult{Result: verdict.CheckFailed,
			Message: fmt.Sprintf("GET %s answered %d, want %d", url, resp.StatusCode, h.Status), Logs: tail(string(body))}}
	case h.BodyContains != "" && !strings.Contains(string(body), h.BodyContains):
		return checkRun{result: verdict.CheckResult{Result: verdict.CheckFailed,
			Message: fmt.Sprintf("GET %s answered %d without %q in its body", url, resp.StatusCode, h.BodyContains), Logs: tail(string(body))}}
	}
	return checkRun{result: verdict.CheckResult{Result: verdict.CheckPassed, Message: fmt.Sprintf("GET %s answered %d", url, resp.StatusCode)}}
}

// CheckJobName is the name of the Job that runs check for the rollout's candidate in wave on
// cluster: the same at every decision, another for another candidate, wave or cluster.
func CheckJobName(fr *v1alpha1.FleetRollout, check, wave, cluster string) string {
	return checkJobName(fr, candidateCheck(fr, wave), check, cluster)
}

// RehearsalCheckJobName is the name of the Job that runs check at the known-good on cluster, in the
// rehearsal of wave.
func RehearsalCheckJobName(fr *v1alpha1.FleetRollout, check, wave, cluster string) string {
	return checkJobName(fr, rehearsalCheck(fr, wave), check, cluster)
}

// RollbackCheckJobName is the name of the Job that runs check at the known-good on cluster, of
// wave, when the rollout rolls back.
func RollbackCheckJobName(fr *v1alpha1.FleetRollout, check, wave, cluster string) string {
	return checkJobName(fr, rollbackCheck(fr, wave), check, cluster)
}

func checkJobName(fr *v1alpha1.FleetRollout, at checkAt, check, cluster string) string {
	h := sha256.Sum256([]byte(string(fr.UID) + "/" + at.key + "/" + at.wave + "/" + cluster))
	if len(check) > 40 {
		check = check[:40]
	}
	return strings.TrimSuffix(check, "-") + "-" + hex.EncodeToString(h[:])[:10]
}

// jobCheck creates the check's Job in the member when it is not there, and reads how it went.
func (c *Collector) jobCheck(ctx context.Context, fr *v1alpha1.FleetRollout, at checkAt, fc *v1alpha1.FleetCluster, name string, j *verdict.JobCheck, timeout time.Duration) checkRun {
	cl, err := c.Members.Client(ctx, fc)
	if err != nil {
		return checkRun{couldNotRun: "the member cannot be reached: " + err.Error()}
	}
	ns := j.Namespace
	if ns == "" {
		ns = fr.Spec.Template.TargetNamespace
	}
	if ns == "" {
		ns = "default"
	}
	key := client.ObjectKey{Namespace: ns, Name: checkJobName(fr, at, name, fc.Name)}
	var job batchv1.Job
	switch err := cl.Get(ctx, key, &job); {
	case apierrors.IsNotFound(err):
		if err := cl.Create(ctx, checkJob(at, key, name, fc.Name, j, timeout)); err != nil && !apierrors.IsAlreadyExists(err) {
			return checkRun{couldNotRun: fmt.Sprintf("creating Job %s: %v", key, err)}
		}
		return checkRun{couldNotRun: fmt.Sprintf("Job %s started; it has not finished", key)}
	case err != nil:
		return checkRun{couldNotRun: fmt.Sprintf("reading Job %s: %v", key, err)}
	}
	if cond := apimeta.FindStatusCondition(jobConditions(&job), string(batchv1.JobComplete)); cond != nil && cond.Status == metav1.ConditionTrue {
		return checkRun{result: verdict.CheckResult{Result: verdict.CheckPassed, Message: fmt.Sprintf("Job %s completed", key)}}
	}
	if cond := apimeta.FindStatusCondition(jobConditions(&job), string(batchv1.JobFailed)); cond != nil && cond.Status == metav1.ConditionTrue {
		return checkRun{result: verdict.CheckResult{Result: verdict.CheckFailed,
			Message: fmt.Sprintf("Job %s failed: %s: %s", key, cond.Reason, cond.Message), Logs: c.jobLogs(ctx, fc, cl, &job)}}
	}
	return checkRun{couldNotRun: fmt.Sprintf("Job %s has not finished (created %s ago)", key, time.Since(job.CreationTimestamp.Time).Round(time.Second))}
}

// checkJob is the Job that runs check j on cluster: no retry (a check that fails once failed), its
// run bounded by the check's timeout, its pods told which cluster and revision they check.
func checkJob(at checkAt, key client.ObjectKey, name, cluster string, j *verdict.JobCheck, timeout time.Duration) *batchv1.Job {
	labels := map[string]string{CheckLabel: name, v1alpha1.ClusterLabel: cluster}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit:            ptr.To[int32](0),
			ActiveDeadlineSeconds:   ptr.To(int64(timeout.Seconds())),
			TTLSecondsAfterFinished: ptr.To[int32](86400),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{
						Name: "check", Image: j.Image, Command: j.Command, Args: j.Args,
						Env: []corev1.EnvVar{
							{Name: "TIDEGATE_CLUSTER", Value: cluster},
							{Name: "TIDEGATE_REVISION", Value: at.revision},
						},
					}},
				},
			},
		},
	}
}

// jobConditions are a Job's conditions as metav1 conditions, for FindStatusCondition.
func jobConditions(job *batchv1.Job) []metav1.Condition {
	out := make([]metav1.Condition, 0, len(job.Status.Conditions))
	for _, c := range job.Status.Conditions {
		out = append(out, metav1.Condition{Type: string(c.Type), Status: metav1.ConditionStatus(c.Status), Reason: c.Reason, Message: c.Message})
	}
	return out
}

// jobLogs is the tail of the logs of the Job's newest pod, or a word on why there is none.
func (c *Collector) jobLogs(ctx context.Context, fc *v1alpha1.FleetCluster, cl client.Client, job *batchv1.Job) string {
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{"batch.kubernetes.io/job-name": job.Name}); err != nil || len(pods.Items) == 0 {
		return "(no pod of the Job to read logs from)"
	}
	newest := slices.MaxFunc(pods.Items, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	cfg, err := c.Members.Config(ctx, fc)
	if err != nil {
		return "(logs not read: " + err.Error() + ")"
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "(logs not read: " + err.Error() + ")"
	}
	b, err := cs.CoreV1().Pods(job.Namespace).GetLogs(newest.Name, &corev1.PodLogOptions{
		TailLines: ptr.To[int64](checkLogLines), LimitBytes: ptr.To[int64](checkLogBytes)}).DoRaw(ctx)
	if err != nil {
		return "(logs not read: " + err.Error() + ")"
	}
	return tail(string(b))
}

// tail is the end of s, at most checkLogBytes.
func tail(s string) string {
	if len(s) > checkLogBytes {
		s = "..." + s[len(s)-checkLogBytes+3:]
	}
	return s
}

// redactURLError drops the URL a transport error names (it can carry credentials).
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// maxBackChecks bounds the check runs status keeps of a way back to the known-good
// (RehearsalStatus.backChecks, RollbackStatus.checks).
const maxBackChecks = 100

// RehearsalChecks runs the policy's functional checks that apply to wave i on its members (or the
// sample of them) at the known-good, while its rehearsal rolls back (knownGoodChecks). nil when the
// policy has no check for the wave.
func (c *Collector) RehearsalChecks(ctx context.Context, w *engine.World, i int) *engine.KnownGoodChecks {
	fr := w.Rollout
	wv := &fr.Status.Waves[i]
	held := map[string]bool{}
	for _, h := range wv.HeldBack {
		held[h.Cluster] = true
	}
	var members []string
	for _, cl := range wv.Clusters {
		if !held[cl] {
			members = append(members, cl)
		}
	}
	return c.knownGoodChecks(ctx, w, rehearsalCheck, []engine.WaveClusters{{Wave: wv.Name, Clusters: members}})
}

// RollbackChecks runs, while the rollout rolls back, the policy's functional checks at the
// known-good on the clusters sent back (engine.CheckedBack), each check on the members of the waves
// it applies to (or the sample of each), as they ran at the candidate (knownGoodChecks). nil when
// the policy has no check for them.
func (c *Collector) RollbackChecks(ctx context.Context, w *engine.World) *engine.KnownGoodChecks {
	return c.knownGoodChecks(ctx, w, rollbackCheck, engine.CheckedBack(w.Rollout, w))
}

// knownGoodChecks runs the policy's functional checks at the known-good on the members of each
// wave, for the checks that apply to it (or their sample, the first by name): each once the member
// is Ready at the known-good, and read until it finishes. Failed runs come first in what it
// returns, so that a bounded status keeps them. nil when no check applies.
func (c *Collector) knownGoodChecks(ctx context.Context, w *engine.World, checkAt func(*v1alpha1.FleetRollout, string) checkAt, waves []engine.WaveClusters) *engine.KnownGoodChecks {
	fr := w.Rollout
	kg := fr.Status.LastKnownGood
	if kg == nil || fr.Status.Candidate == nil {
		return nil
	}
	var out *engine.KnownGoodChecks
	for _, name := range slices.Sorted(maps.Keys(w.Settings.Checks)) {
		chk := w.Settings.Checks[name]
		for _, wm := range waves {
			if !chk.AppliesTo(wm.Wave) {
				continue
			}
			if out == nil {
				out = &engine.KnownGoodChecks{}
			}
			run := slices.Sorted(slices.Values(wm.Clusters))
			if chk.Sample > 0 && chk.Sample < len(run) {
				run = run[:chk.Sample]
			}
			results := make([]checkRun, len(run))
			evidence.Each(len(run), checksParallel, func(j int) {
				if !w.Kustomizations[run[j]].ReadyAt(kg.Source, kg.Revision) {
					results[j] = checkRun{couldNotRun: "not Ready at the known-good yet"}
					return
				}
				results[j] = c.runCheck(ctx, w, checkAt(fr, wm.Wave), name, chk, run[j])
			})
			for j, cl := range run {
				r := results[j]
				if r.couldNotRun != "" {
					out.Pending = append(out.Pending, cl+" ("+name+"): "+r.couldNotRun)
					continue
				}
				msg := r.result.Message
				if len(msg) > 1024 {
					msg = msg[:1021] + "..."
				}
				out.Runs = append(out.Runs, v1alpha1.CheckRun{Cluster: cl, Check: name, Result: r.result.Result, Message: msg})
			}
		}
	}
	if out != nil {
		slices.SortStableFunc(out.Runs, func(a, b v1alpha1.CheckRun) int {
			return strings.Compare(a.Result, b.Result) // Failed before Passed
		})
		if len(out.Runs) > maxBackChecks {
			out.Runs = out.Runs[:maxBackChecks]
		}
	}
	return out
}
