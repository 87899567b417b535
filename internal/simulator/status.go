package simulator

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
)

// The reasons and messages are the ones kube-controller-manager writes, so that anything reading a
// simulated cluster (kstatus in kustomize-controller, people, tidegate's evidence) sees what a real one shows.
const (
	reasonMinimumReplicasAvailable   = "MinimumReplicasAvailable"
	reasonMinimumReplicasUnavailable = "MinimumReplicasUnavailable"
	reasonNewReplicaSetAvailable     = "NewReplicaSetAvailable"
	reasonReplicaSetUpdated          = "ReplicaSetUpdated"
	reasonProgressDeadlineExceeded   = "ProgressDeadlineExceeded"
)

// The status functions below are pure: (object, verdict, now) → the status a cluster would show. Every
// field they do not own (collision counts, terminating replicas, foreign conditions) is carried over from
// the object, so that a pass over an unchanged object computes exactly its current status and writes nothing.

// deploymentStatus is the status of d once the deployment controller and kubelets have acted on v.
func deploymentStatus(d *appsv1.Deployment, v verdict, now time.Time) appsv1.DeploymentStatus {
	want := replicas(d.Spec.Replicas)
	ready := int32(0)
	if v.ready || want == 0 {
		ready = want
	}
	rs := d.Name + "-" + templateHash(d.Spec.Template)

	available := condition{corev1.ConditionTrue, reasonMinimumReplicasAvailable, "Deployment has minimum availability."}
	if ready < want {
		available = condition{corev1.ConditionFalse, reasonMinimumReplicasUnavailable, "Deployment does not have minimum availability."}
	}
	progressing := condition{corev1.ConditionTrue, reasonReplicaSetUpdated, fmt.Sprintf("ReplicaSet %q is progressing.", rs)}
	switch {
	case v.rolledOut:
		progressing = condition{corev1.ConditionTrue, reasonNewReplicaSetAvailable, fmt.Sprintf("ReplicaSet %q has successfully progressed.", rs)}
	case v.deadlineExceeded:
		progressing = condition{corev1.ConditionFalse, reasonProgressDeadlineExceeded, fmt.Sprintf("ReplicaSet %q has timed out progressing.", rs)}
	}

	old := d.Status
	st := appsv1.DeploymentStatus{
		ObservedGeneration:  d.Generation,
		Replicas:            want,
		UpdatedReplicas:     want,
		ReadyReplicas:       ready,
		AvailableReplicas:   ready,
		UnavailableReplicas: want - ready,
		TerminatingReplicas: old.TerminatingReplicas,
		CollisionCount:      old.CollisionCount,
	}
	// Available before Progressing, the order kube-controller-manager leaves them in; conditions of other
	// types (someone else's) are kept after them.
	st.Conditions = []appsv1.DeploymentCondition{
		deploymentCondition(old.Conditions, appsv1.DeploymentAvailable, available, now),
		deploymentCondition(old.Conditions, appsv1.DeploymentProgressing, progressing, now),
	}
	for _, c := range old.Conditions {
		if c.Type != appsv1.DeploymentAvailable && c.Type != appsv1.DeploymentProgressing {
			st.Conditions = append(st.Conditions, c)
		}
	}
	return st
}

// deploymentRolledOut says whether d's status already shows its current generation fully rolled out, so a
// simulator that starts (or restarts) next to a healthy Deployment does not replay its rollout.
func deploymentRolledOut(d *appsv1.Deployment) bool {
	want, s := replicas(d.Spec.Replicas), d.Status
	if s.ObservedGeneration != d.Generation || s.Replicas != want || s.UpdatedReplicas != want ||
		s.ReadyReplicas != want || s.AvailableReplicas != want {
		return false
	}
	for _, c := range s.Conditions {
		if c.Type == appsv1.DeploymentProgressing {
			return c.Status == corev1.ConditionTrue && c.Reason == reasonNewReplicaSetAvailable
		}
	}
	return false
}

// progressDeadline is d's spec.progressDeadlineSeconds, 0 when it has none (nil or MaxInt32, which the
// deployment controller and kstatus both read as "never").
func progressDeadline(d *appsv1.Deployment) time.Duration {
	p := d.Spec.ProgressDeadlineSeconds
	if p == nil || *p <= 0 || *p == math.MaxInt32 {
		return 0
	}
	return time.Duration(*p) * time.Second
}

// statefulSetStatus is the status of s once the StatefulSet controller and kubelets have acted on v.
func statefulSetStatus(s *appsv1.StatefulSet, v verdict) appsv1.StatefulSetStatus {
	want := replicas(s.Spec.Replicas)
	ready := int32(0)
	if v.ready || want == 0 {
		ready = want
	}
	rev := s.Name + "-" + templateHash(s.Spec.Template)
	old := s.Status
	// The current revision moves to the update revision only when the rollout completes; until then the
	// pods still count as the old revision's, as the StatefulSet controller reports them.
	current, currentReplicas := rev, want
	if !v.rolledOut && old.CurrentRevision != "" && old.CurrentRevision != rev {
		current, currentReplicas = old.CurrentRevision, 0
	}
	return appsv1.StatefulSetStatus{
		ObservedGeneration: s.Generation,
		Replicas:           want,
		ReadyReplicas:      ready,
		AvailableReplicas:  ready,
		CurrentReplicas:    currentReplicas,
		UpdatedReplicas:    want,
		CurrentRevision:    current,
		UpdateRevision:     rev,
		CollisionCount:     old.CollisionCount,
		Conditions:         old.Conditions,
	}
}

// statefulSetRolledOut says whether s's status already shows its current generation fully rolled out.
func statefulSetRolledOut(s *appsv1.StatefulSet) bool {
	want, st := replicas(s.Spec.Replicas), s.Status
	return st.ObservedGeneration == s.Generation && st.Replicas == want && st.ReadyReplicas == want &&
		st.UpdatedReplicas == want && st.CurrentReplicas == want && st.CurrentRevision == st.UpdateRevision &&
		st.UpdateRevision == s.Name+"-"+templateHash(s.Spec.Template)
}

// daemonSetStatus is the status of d on a cluster of nodes nodes, all of which it schedules onto (the
// simulator has no node objects to select from), once the DaemonSet controller and kubelets acted on v.
func daemonSetStatus(d *appsv1.DaemonSet, nodes int32, v verdict) appsv1.DaemonSetStatus {
	ready := int32(0)
	if v.ready {
		ready = nodes
	}
	old := d.Status
	return appsv1.DaemonSetStatus{
		ObservedGeneration:     d.Generation,
		DesiredNumberScheduled: nodes,
		CurrentNumberScheduled: nodes,
		UpdatedNumberScheduled: nodes,
		NumberMisscheduled:     0,
		NumberReady:            ready,
		NumberAvailable:        ready,
		NumberUnavailable:      nodes - ready,
		CollisionCount:         old.CollisionCount,
		Conditions:             old.Conditions,
	}
}

// daemonSetRolledOut says whether d's status already shows its current generation fully rolled out.
func daemonSetRolledOut(d *appsv1.DaemonSet, nodes int32) bool {
	s := d.Status
	return s.ObservedGeneration == d.Generation && s.DesiredNumberScheduled == nodes &&
		s.CurrentNumberScheduled == nodes && s.UpdatedNumberScheduled == nodes &&
		s.NumberReady == nodes && s.NumberAvailable == nodes
}

type condition struct {
	status  corev1.ConditionStatus
	reason  string
	message string
}

// deploymentCondition builds condition c of type t, keeping the times of the previous condition of that
// type where it did not change: lastTransitionTime while the status holds, lastUpdateTime while nothing
// does. Without that every pass would write a new timestamp.
func deploymentCondition(prev []appsv1.DeploymentCondition, t appsv1.DeploymentConditionType, c condition, now time.Time) appsv1.DeploymentCondition {
	// The API stores times to the second; a finer time would differ from its stored self on the next pass.
	ts := metav1.NewTime(now.Truncate(time.Second))
	out := appsv1.DeploymentCondition{
		Type: t, Status: c.status, Reason: c.reason, Message: c.message, LastUpdateTime: ts, LastTransitionTime: ts,
	}
	for _, p := range prev {
		if p.Type != t || p.Status != c.status {
			continue
		}
		out.LastTransitionTime = p.LastTransitionTime
		if p.Reason == c.reason && p.Message == c.message {
			out.LastUpdateTime = p.LastUpdateTime
		}
	}
	return out
}

// replicas is spec.replicas with the API's default of 1.
func replicas(r *int32) int32 {
	return deref(r, 1)
}

// templateHash names a pod template the way pod-template-hash and controller-revision-hash do (a short,
// DNS-safe hash), so a new template shows up as a new ReplicaSet or revision name in status.
func templateHash(t corev1.PodTemplateSpec) string {
	b, err := json.Marshal(t)
	if err != nil {
		// A PodTemplateSpec always marshals; if it ever did not, one fixed name is still a valid answer.
		return "0"
	}
	h := fnv.New32a()
	_, _ = h.Write(b)
	return rand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}
