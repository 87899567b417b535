package simulator

import (
	"context"
	"testing"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// autoscaler is an HPA of the Deployment web between minReplicas and maxReplicas on 70 % of the
// pods' CPU requests.
func autoscaler(ns string, minReplicas, maxReplicas int32) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Generation: 1},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
			MinReplicas:    ptr(minReplicas),
			MaxReplicas:    maxReplicas,
			Metrics: []autoscalingv2.MetricSpec{{Type: autoscalingv2.ResourceMetricSourceType, Resource: &autoscalingv2.ResourceMetricSource{
				Name: corev1.ResourceCPU, Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr(int32(70))},
			}}},
		},
	}
}

func hpaCond(h *autoscalingv2.HorizontalPodAutoscaler, t autoscalingv2.HorizontalPodAutoscalerConditionType) autoscalingv2.HorizontalPodAutoscalerCondition {
	for _, c := range h.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return autoscalingv2.HorizontalPodAutoscalerCondition{}
}

// checkSettled fails t unless h reports what a settled autoscaler of a target at replicas does, and
// kstatus reads it Current.
func checkSettled(t *testing.T, h *autoscalingv2.HorizontalPodAutoscaler, replicas int32) {
	t.Helper()
	st := h.Status
	if st.CurrentReplicas != replicas || st.DesiredReplicas != replicas || st.ObservedGeneration == nil || *st.ObservedGeneration != h.Generation {
		t.Errorf("HPA status %+v, want %d current and desired, generation %d observed", st, replicas, h.Generation)
	}
	for ct, want := range map[autoscalingv2.HorizontalPodAutoscalerConditionType]corev1.ConditionStatus{
		autoscalingv2.AbleToScale: corev1.ConditionTrue, autoscalingv2.ScalingActive: corev1.ConditionTrue, autoscalingv2.ScalingLimited: corev1.ConditionFalse,
	} {
		if c := hpaCond(h, ct); c.Status != want {
			t.Errorf("HPA condition %s is %+v, want %s", ct, c, want)
		}
	}
	if len(st.CurrentMetrics) != 1 || st.CurrentMetrics[0].Resource == nil || *st.CurrentMetrics[0].Resource.Current.AverageUtilization != 70 {
		t.Errorf("HPA metrics %+v, want the CPU on its 70 %% target", st.CurrentMetrics)
	}
	if got := kstatusOf(t, h); got != status.CurrentStatus {
		t.Errorf("HPA kstatus %s, want Current", got)
	}
}

func TestDesiredReplicasIsTheTargetsWithinTheBounds(t *testing.T) {
	h := autoscaler("demo", 2, 5)
	for current, want := range map[int32]int32{0: 0, 1: 2, 2: 2, 4: 4, 5: 5, 9: 5} {
		if got := desiredReplicas(h, current); got != want {
			t.Errorf("desired replicas of a target at %d = %d, want %d", current, got, want)
		}
	}
	h.Spec.MinReplicas = ptr(int32(0))
	if got := desiredReplicas(h, 0); got != 0 {
		t.Errorf("desired replicas of a target at 0 with minReplicas 0 = %d, want 0", got)
	}
}

// An autoscaler whose target is within its bounds is settled and Current at once, and a later pass
// computes the very status it has; one that scaled its target says so until the target got there.
func TestAutoscalerStatusIsCurrent(t *testing.T) {
	able := condition{corev1.ConditionTrue, reasonReadyForNewScale, "recommended size matches current size"}
	h := autoscaler("demo", 2, 5)
	h.Status = roundTrip(t, autoscalerStatus(h, able, 3, 3, t0))
	checkSettled(t, h, 3)
	if again := roundTrip(t, autoscalerStatus(h, able, 3, 3, t0.Add(time.Minute))); !equality.Semantic.DeepEqual(again, h.Status) {
		t.Errorf("a later pass changes a settled status:\n%+v\n%+v", h.Status, again)
	}

	rescaled := condition{corev1.ConditionTrue, reasonSucceededRescale, "the HPA controller was able to update the target scale to 2"}
	h = autoscaler("demo", 2, 5)
	h.Status = roundTrip(t, autoscalerStatus(h, rescaled, 1, 2, t0))
	if c := hpaCond(h, autoscalingv2.ScalingLimited); c.Status != corev1.ConditionTrue || c.Reason != "TooFewReplicas" || h.Status.DesiredReplicas != 2 {
		t.Errorf("rescaled from 1 to 2: %+v, want desired 2 and ScalingLimited TooFewReplicas", h.Status)
	}
	h.Status = roundTrip(t, autoscalerStatus(h, able, 2, 2, t0.Add(time.Minute)))
	checkSettled(t, h, 2)
	if c := hpaCond(h, autoscalingv2.AbleToScale); !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("AbleToScale moved its transition time to %v while it stayed True", c.LastTransitionTime)
	}
}

// An autoscaler scales a Deployment below its minimum up to it, through the scale subresource, and
// reports itself settled; a pass after writes nothing. One whose target does not exist says it
// cannot get its scale, as the controller does.
func TestOnAPIServerAutoscalerScalesItsTargetIntoItsBounds(t *testing.T) {
	s, ns := start(t)
	d := inNamespace(deployment(1), ns)
	h := autoscaler(ns, 2, 5)
	h.Generation = 0
	create(t, d)
	create(t, h)
	waitUntil(t, d, "Current at 2 replicas", func(st status.Status) bool {
		return st == status.CurrentStatus && d.Status.AvailableReplicas == 2
	})
	if *d.Spec.Replicas != 2 {
		t.Errorf("Deployment scaled to %d, want 2", *d.Spec.Replicas)
	}
	waitUntil(t, h, "settled", func(status.Status) bool {
		return h.Status.CurrentReplicas == 2 && hpaCond(h, autoscalingv2.AbleToScale).Reason == reasonReadyForNewScale
	})
	checkSettled(t, h, 2)
	if h.Status.LastScaleTime == nil {
		t.Errorf("HPA scaled its target but has no lastScaleTime")
	}

	missing := autoscaler(ns, 1, 3)
	missing.Name, missing.Generation, missing.Spec.ScaleTargetRef.Name = "none", 0, "none"
	create(t, missing)
	waitUntil(t, missing, "unable to get its scale", func(status.Status) bool {
		return hpaCond(missing, autoscalingv2.AbleToScale).Reason == reasonFailedGetScale
	})
	if c := hpaCond(missing, autoscalingv2.AbleToScale); c.Status != corev1.ConditionFalse {
		t.Errorf("HPA of a missing target: AbleToScale %+v, want False", c)
	}

	time.Sleep(time.Second + 5*interval)
	if n, err := s.Sync(context.Background(), cluster); err != nil || n != 0 {
		t.Fatalf("Sync over settled autoscalers wrote %d times (err %v), want 0", n, err)
	}
	var got appsv1.Deployment
	if err := memberClient.Get(context.Background(), client.ObjectKeyFromObject(d), &got); err != nil || *got.Spec.Replicas != 2 {
		t.Errorf("Deployment after settling: %v replicas (err %v), want 2", got.Spec.Replicas, err)
	}
}
