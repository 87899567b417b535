package simulator

import (
	"fmt"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The simulator plays the HorizontalPodAutoscaler controller with every metric on its target: the
// load of a simulated cluster is what its autoscalers ask for, so an autoscaler wants the replicas
// its target has, brought within minReplicas and maxReplicas. A target outside them is scaled to the
// nearer bound through its scale subresource, as the controller does; then the autoscaler reports
// what a settled one does (AbleToScale and ScalingActive True, ScalingLimited False). A package that
// sets its workload's replicas outside the bounds is scaled back on every apply, as on a cluster.

// The reasons and messages of the HorizontalPodAutoscaler controller (pkg/controller/podautoscaler).
const (
	reasonSucceededGetScale  = "SucceededGetScale"
	reasonFailedGetScale     = "FailedGetScale"
	reasonSucceededRescale   = "SucceededRescale"
	reasonFailedUpdateScale  = "FailedUpdateScale"
	reasonReadyForNewScale   = "ReadyForNewScale"
	reasonValidMetricFound   = "ValidMetricFound"
	reasonScalingDisabled    = "ScalingDisabled"
	reasonDesiredWithinRange = "DesiredWithinRange"
)

// autoscalers reads the target of each HorizontalPodAutoscaler of w's member, scales it into the
// autoscaler's bounds when it is outside them, and writes the autoscaler's status.
func (s *Simulator) autoscalers(w *writes, now time.Time) {
	var hpas autoscalingv2.HorizontalPodAutoscalerList
	if !w.list("HorizontalPodAutoscalers", &hpas) {
		return
	}
	for i := range hpas.Items {
		h := &hpas.Items[i]
		if h.DeletionTimestamp != nil {
			continue
		}
		ref := h.Spec.ScaleTargetRef
		target := &unstructured.Unstructured{}
		target.SetAPIVersion(ref.APIVersion)
		target.SetKind(ref.Kind)
		target.SetNamespace(h.Namespace)
		target.SetName(ref.Name)
		scale := &unstructured.Unstructured{}
		var st autoscalingv2.HorizontalPodAutoscalerStatus
		if err := w.m.client.SubResource("scale").Get(w.ctx, target, scale); err != nil {
			st = autoscalerStatus(h, condition{corev1.ConditionFalse, reasonFailedGetScale,
				"the HPA controller was unable to get the target's current scale: " + err.Error()},
				h.Status.CurrentReplicas, h.Status.DesiredReplicas, now)
		} else {
			st = s.autoscale(w, h, target, scale, now)
		}
		changed := !equality.Semantic.DeepEqual(h.Status, st)
		h.Status = st
		w.status("HorizontalPodAutoscaler", h, changed)
	}
}

// autoscale decides h's replicas from its target's scale, scales the target when they differ, and
// returns h's status after it.
func (s *Simulator) autoscale(w *writes, h *autoscalingv2.HorizontalPodAutoscaler, target, scale *unstructured.Unstructured, now time.Time) autoscalingv2.HorizontalPodAutoscalerStatus {
	replicas, _, _ := unstructured.NestedInt64(scale.Object, "spec", "replicas")
	current := int32(replicas)
	desired := desiredReplicas(h, current)
	if desired == current {
		return autoscalerStatus(h, condition{corev1.ConditionTrue, reasonReadyForNewScale, "recommended size matches current size"}, current, desired, now)
	}
	if err := unstructured.SetNestedField(scale.Object, int64(desired), "spec", "replicas"); err != nil {
		return h.Status
	}
	err := w.m.client.SubResource("scale").Update(w.ctx, target, client.WithSubResourceBody(scale))
	if !w.record("scaling", target.GetKind(), target, err) {
		return autoscalerStatus(h, condition{corev1.ConditionFalse, reasonFailedUpdateScale,
			"the HPA controller was unable to update the target scale: " + err.Error()}, current, desired, now)
	}
	st := autoscalerStatus(h, condition{corev1.ConditionTrue, reasonSucceededRescale,
		fmt.Sprintf("the HPA controller was able to update the target scale to %d", desired)}, current, desired, now)
	st.LastScaleTime = ptrTo(metav1.NewTime(now.Truncate(time.Second)))
	return st
}

// desiredReplicas is how many replicas h wants of a target running current, every metric on its
// target: current within h's bounds, and 0 for a target scaled to 0 (which disables autoscaling).
func desiredReplicas(h *autoscalingv2.HorizontalPodAutoscaler, current int32) int32 {
	minimum := deref(h.Spec.MinReplicas, 1)
	switch {
	case current == 0 && minimum != 0:
		return 0
	case current < minimum:
		return minimum
	case current > h.Spec.MaxReplicas:
		return h.Spec.MaxReplicas
	}
	return current
}

// autoscalerStatus is h's status with its target at current replicas wanting desired, its
// AbleToScale condition able; ScalingActive True with every metric on its target (False for a
// target scaled to 0), and ScalingLimited True while desired is a bound the target is outside of.
// A target it could not read leaves the counts, the other conditions and the metrics as they were,
// as the controller does.
func autoscalerStatus(h *autoscalingv2.HorizontalPodAutoscaler, able condition, current, desired int32, now time.Time) autoscalingv2.HorizontalPodAutoscalerStatus {
	old := h.Status
	st := autoscalingv2.HorizontalPodAutoscalerStatus{
		ObservedGeneration: ptrTo(h.Generation),
		LastScaleTime:      old.LastScaleTime,
		CurrentReplicas:    current,
		DesiredReplicas:    desired,
		CurrentMetrics:     old.CurrentMetrics,
	}
	conds := map[autoscalingv2.HorizontalPodAutoscalerConditionType]condition{autoscalingv2.AbleToScale: able}
	if able.reason != reasonFailedGetScale {
		active := condition{corev1.ConditionTrue, reasonValidMetricFound,
			"the HPA was able to successfully calculate a replica count from " + metricName(h)}
		st.CurrentMetrics = metricsOnTarget(h.Spec.Metrics)
		if current == 0 && desired == 0 && deref(h.Spec.MinReplicas, 1) != 0 {
			active = condition{corev1.ConditionFalse, reasonScalingDisabled, "scaling is disabled since the replica count of the target is zero"}
			st.CurrentMetrics = nil
		}
		limited := condition{corev1.ConditionFalse, reasonDesiredWithinRange, "the desired count is within the acceptable range"}
		switch {
		case desired > current:
			limited = condition{corev1.ConditionTrue, "TooFewReplicas", "the desired replica count is less than the minimum replica count"}
		case desired < current:
			limited = condition{corev1.ConditionTrue, "TooManyReplicas", "the desired replica count is more than the maximum replica count"}
		}
		conds[autoscalingv2.ScalingActive] = active
		conds[autoscalingv2.ScalingLimited] = limited
	}
	// In the controller's order, each condition keeping its transition time while its status holds.
	for _, t := range []autoscalingv2.HorizontalPodAutoscalerConditionType{autoscalingv2.AbleToScale, autoscalingv2.ScalingActive, autoscalingv2.ScalingLimited} {
		var prev *autoscalingv2.HorizontalPodAutoscalerCondition
		for i := range old.Conditions {
			if old.Conditions[i].Type == t {
				prev = &old.Conditions[i]
			}
		}
		c, set := conds[t]
		switch {
		case !set && prev != nil:
			st.Conditions = append(st.Conditions, *prev)
		case set:
			// The API stores times to the second; a finer time would differ from its stored self.
			ts := metav1.NewTime(now.Truncate(time.Second))
			if prev != nil && prev.Status == c.status {
				ts = prev.LastTransitionTime
			}
			st.Conditions = append(st.Conditions, autoscalingv2.HorizontalPodAutoscalerCondition{
				Type: t, Status: c.status, Reason: c.reason, Message: c.message, LastTransitionTime: ts,
			})
		}
	}
	return st
}

// metricsOnTarget is what the controller reads of metrics, every one of them on its target.
func metricsOnTarget(metrics []autoscalingv2.MetricSpec) []autoscalingv2.MetricStatus {
	var out []autoscalingv2.MetricStatus
	onTarget := func(t autoscalingv2.MetricTarget) autoscalingv2.MetricValueStatus {
		return autoscalingv2.MetricValueStatus{Value: t.Value, AverageValue: t.AverageValue, AverageUtilization: t.AverageUtilization}
	}
	for _, m := range metrics {
		st := autoscalingv2.MetricStatus{Type: m.Type}
		switch {
		case m.Resource != nil:
			st.Resource = &autoscalingv2.ResourceMetricStatus{Name: m.Resource.Name, Current: onTarget(m.Resource.Target)}
		case m.ContainerResource != nil:
			st.ContainerResource = &autoscalingv2.ContainerResourceMetricStatus{Name: m.ContainerResource.Name,
				Container: m.ContainerResource.Container, Current: onTarget(m.ContainerResource.Target)}
		case m.Pods != nil:
			st.Pods = &autoscalingv2.PodsMetricStatus{Metric: m.Pods.Metric, Current: onTarget(m.Pods.Target)}
		case m.Object != nil:
			st.Object = &autoscalingv2.ObjectMetricStatus{Metric: m.Object.Metric, DescribedObject: m.Object.DescribedObject,
				Current: onTarget(m.Object.Target)}
		case m.External != nil:
			st.External = &autoscalingv2.ExternalMetricStatus{Metric: m.External.Metric, Current: onTarget(m.External.Target)}
		default:
			continue
		}
		out = append(out, st)
	}
	return out
}

// metricName names h's first metric as the controller's ScalingActive message does.
func metricName(h *autoscalingv2.HorizontalPodAutoscaler) string {
	if len(h.Spec.Metrics) == 0 {
		return "its metrics"
	}
	m := h.Spec.Metrics[0]
	switch {
	case m.Resource != nil && m.Resource.Target.AverageUtilization != nil:
		return fmt.Sprintf("%s resource utilization (percentage of request)", m.Resource.Name)
	case m.Resource != nil:
		return fmt.Sprintf("%s resource", m.Resource.Name)
	case m.ContainerResource != nil && m.ContainerResource.Target.AverageUtilization != nil:
		return fmt.Sprintf("%s container resource utilization (percentage of request)", m.ContainerResource.Name)
	case m.ContainerResource != nil:
		return fmt.Sprintf("%s container resource", m.ContainerResource.Name)
	case m.Pods != nil:
		return "pods metric " + m.Pods.Metric.Name
	case m.Object != nil:
		return fmt.Sprintf("%s metric %s", m.Object.DescribedObject.Kind, m.Object.Metric.Name)
	case m.External != nil:
		return "external metric " + m.External.Metric.Name
	}
	return "its metrics"
}
