package engine

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/verdict"
)

const (
	chartDigest = "sha256:1a2b3c4d5e6f00112233445566778899aabbccddeeff00112233445566778899"
	chartRev    = "0.2.0@" + chartDigest
)

func chartRollout() *v1alpha1.FleetRollout {
	fr := &v1alpha1.FleetRollout{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "fleet"}}
	fr.Spec.SourceRef = v1alpha1.SourceReference{Kind: "OCIRepository", Name: "web-chart"}
	fr.Spec.Chart = &v1alpha1.ChartSpec{ReleaseName: "web", Values: &apiextensionsv1.JSON{Raw: []byte(`{"ingress":{"class":"nginx"},"replicas":2}`)}}
	fr.Spec.Template.TargetNamespace = "apps"
	fr.Spec.Template.DependsOn = []meta.LocalObjectReference{{Name: "db"}}
	no := false
	fr.Spec.Template.Wait = &no
	return fr
}

// A chart rollout's member is a HelmRelease named as its Kustomization would be, with its labels and
// revision, pointing at the pinned OCIRepository (chartRef), installed on the member as the
// rollout's release in the release namespace, with the chart's values and the cluster's at their
// dotted paths, the cluster's recorded for a rollback after the FleetCluster is gone, and
// helm-controller told to retry a failed release and never remediate it.
func TestDesiredHelmRelease(t *testing.T) {
	fr := chartRollout()
	fc := &v1alpha1.FleetCluster{ObjectMeta: metav1.ObjectMeta{Name: "eu-1", Namespace: "fleet"}, Spec: v1alpha1.FleetClusterSpec{
		KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "eu-1-kubeconfig", Key: "value"}},
		Values:     map[string]string{"ingress.host": "eu-1.example", "region": "eu"},
	}}
	tg := Target{Source: "web-1a2b3c4d5e6f", Revision: chartRev, Wave: "canary"}
	obj, err := DesiredMember(fr, fc, tg)
	if err != nil {
		t.Fatal(err)
	}
	hr, ok := obj.(*helmv2.HelmRelease)
	if !ok {
		t.Fatalf("a chart rollout's member is a %T", obj)
	}
	if hr.Name != v1alpha1.KustomizationName("web", "eu-1") || hr.Namespace != "fleet" || hr.Labels[v1alpha1.WaveLabel] != "canary" ||
		hr.Labels[v1alpha1.ClusterLabel] != "eu-1" || hr.Annotations[v1alpha1.RevisionAnnotation] != chartRev {
		t.Errorf("metadata %+v", hr.ObjectMeta)
	}
	s := hr.Spec
	if s.ChartRef == nil || s.ChartRef.Kind != "OCIRepository" || s.ChartRef.Name != tg.Source || s.Chart != nil {
		t.Errorf("chartRef %+v, chart %+v", s.ChartRef, s.Chart)
	}
	if s.ReleaseName != "web" || s.TargetNamespace != "apps" || s.StorageNamespace != "apps" || !s.Install.CreateNamespace {
		t.Errorf("release %s in %s, stored in %s, createNamespace %v", s.ReleaseName, s.TargetNamespace, s.StorageNamespace, s.Install.CreateNamespace)
	}
	if s.KubeConfig == nil || s.KubeConfig.SecretRef.Name != "eu-1-kubeconfig" {
		t.Errorf("kubeConfig %+v", s.KubeConfig)
	}
	var values map[string]any
	if err := json.Unmarshal(s.Values.Raw, &values); err != nil {
		t.Fatal(err)
	}
	ingress, _ := values["ingress"].(map[string]any)
	if ingress["host"] != "eu-1.example" || ingress["class"] != "nginx" || values["region"] != "eu" || values["replicas"] != float64(2) {
		t.Errorf("values %v", values)
	}
	if len(s.DependsOn) != 1 || s.DependsOn[0].Name != v1alpha1.KustomizationName("db", "eu-1") {
		t.Errorf("dependsOn %+v", s.DependsOn)
	}
	if !s.Install.DisableWait || !s.Upgrade.DisableWait {
		t.Errorf("wait: false in the template is install and upgrade disableWait: %+v %+v", s.Install, s.Upgrade)
	}
	retry := string(helmv2.ActionStrategyRetryOnFailure)
	if s.Install.Strategy == nil || s.Install.Strategy.Name != retry || s.Upgrade.Strategy == nil || s.Upgrade.Strategy.Name != retry ||
		s.Install.Remediation != nil || s.Upgrade.Remediation != nil || s.Upgrade.Strategy.RetryInterval.Duration != time.Minute {
		t.Errorf("a failed release is retried, never remediated: install %+v, upgrade %+v", s.Install, s.Upgrade)
	}

	// Gone, the FleetCluster is rebuilt from its HelmRelease, and the HelmRelease written for the
	// stand-in is the same build.
	stand := departed("eu-1", hr)
	if !maps.Equal(stand.Spec.Values, fc.Spec.Values) || stand.Spec.KubeConfig.SecretRef.Name != "eu-1-kubeconfig" {
		t.Errorf("departed: %+v", stand.Spec)
	}
	hash, _ := SpecHash(hr)
	if err := StampHashes(hr, hash); err != nil {
		t.Fatal(err)
	}
	if !sameBuildAt(fr, stand, tg, hr) {
		t.Error("the HelmRelease written for the departed cluster's stand-in is not the one it had")
	}
	if sameBuildAt(fr, fc, Target{Source: "web-other", Revision: chartRev, Wave: "canary"}, hr) {
		t.Error("another pinned source is another build")
	}
	if kept, err := SpecKept(hr, hr.DeepCopy()); err != nil || !kept {
		t.Errorf("SpecKept of the same HelmRelease: %v, %v", kept, err)
	}

	bad := fc.DeepCopy()
	bad.Spec.Values = map[string]string{"ingress..host": "x"}
	if _, err := DesiredMember(fr, bad, tg); err == nil || !strings.Contains(err.Error(), "FleetCluster fleet/eu-1") {
		t.Errorf("values that do not fit the chart's: %v; want an error naming the FleetCluster", err)
	}
	git := chartRollout()
	git.Spec.SourceRef.Kind = "GitRepository"
	if _, err := DesiredMember(git, fc, tg); err == nil || !strings.Contains(err.Error(), "OCIRepository") || !strings.Contains(err.Error(), "HelmChart of it") {
		t.Errorf("a chart from a GitRepository: %v; want it refused, naming the fix", err)
	}
	// A chart of a HelmChart: chartRef names the pinned HelmChart.
	helmChart := chartRollout()
	helmChart.Spec.SourceRef.Kind = "HelmChart"
	if obj, err := DesiredMember(helmChart, fc, tg); err != nil || obj.(*helmv2.HelmRelease).Spec.ChartRef.Kind != "HelmChart" {
		t.Errorf("a chart from a HelmChart: %+v, %v; want chartRef to the pinned HelmChart", obj, err)
	}
}

// helmChartRelease is a HelmRelease at generation 2 written for revision (its annotation), pointing
// at the pinned HelmChart source, observed at generation observed, whose latest release was of the
// chart's version with status and whose Ready condition is ready/reason; helm-controller records no
// OCI digest for a HelmChart's chart.
func helmChartRelease(source, revision, version, status string, ready metav1.ConditionStatus, reason string, observed int64) *helmv2.HelmRelease {
	h := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Generation: 2, Annotations: map[string]string{v1alpha1.RevisionAnnotation: revision}}}
	h.Spec.ChartRef = &helmv2.CrossNamespaceSourceReference{Kind: "HelmChart", Name: source}
	h.Status.ObservedGeneration = observed
	h.Status.LastAttemptedRevision = version
	h.Status.History = helmv2.Snapshots{
		{Version: 1, Status: "superseded", ChartVersion: "0.1.0"},
		{Version: 2, Status: status, Action: helmv2.ReleaseActionUpgrade, ChartVersion: version},
	}
	h.Status.Conditions = []metav1.Condition{{Type: meta.ReadyCondition, Status: ready, Reason: reason, ObservedGeneration: observed}}
	return h
}

// A HelmRelease of a HelmChart's chart runs the revision it was written for when its latest release
// is of that revision's chart version (the ref of "<version>@<digest>"): Ready there when Ready for
// its generation, failed when the release of that version failed. A release of another version
// (the known-good's, before the upgrade to the candidate; the candidate's, after tidegate pointed
// it back at the known-good) is not of the revision, and neither is a version on a HelmRelease of
// an OCIRepository, whose revision is its digest alone.
func TestObserveHelmReleaseOfAHelmChart(t *testing.T) {
	const src = "web-1a2b3c4d5e6f"
	const knownGood = "0.1.0@sha256:00000000000000000000000000000000000000000000000000000000000000ff"
	ready := helmChartRelease(src, chartRev, "0.2.0", "deployed", metav1.ConditionTrue, helmv2.UpgradeSucceededReason, 2)
	if o := Observe(ready); !o.ReadyAt(src, chartRev) || !o.StillAt(src, chartRev) || o.LastApplied != chartRev || o.LastAttempted != chartRev {
		t.Errorf("released and Ready: %+v, want Ready at %s", o, chartRev)
	}
	failed := helmChartRelease(src, chartRev, "0.2.0", "failed", metav1.ConditionFalse, helmv2.UpgradeFailedReason, 2)
	if o := Observe(failed); !o.FailedAt(src, chartRev) || o.ReadyAt(src, chartRev) || o.LastReconciledStatus != helmv2.UpgradeFailedReason {
		t.Errorf("upgrade failed: %+v, want failed at %s", Observe(failed), chartRev)
	}
	busy := helmChartRelease(src, chartRev, "0.2.0", "deployed", metav1.ConditionUnknown, meta.ProgressingReason, 2)
	if ok, known := Observe(busy).Settled(src, chartRev); !ok || !known {
		t.Errorf("mid-upgrade of the same spec: Settled = %v, %v", ok, known)
	}
	// Just switched to the candidate: the latest release is the known-good's version.
	switched := helmChartRelease(src, chartRev, "0.1.0", "deployed", metav1.ConditionTrue, helmv2.UpgradeSucceededReason, 1)
	if o := Observe(switched); o.LastApplied != "" || o.ReadyAt(src, chartRev) || o.StillAt(src, chartRev) || o.AwaitingAt(src, chartRev) {
		t.Errorf("switched, not upgraded yet: %+v, want no revision applied", o)
	}
	// Pointed back at the known-good, not yet rolled back: the latest release is the candidate's.
	back := helmChartRelease("web-000000000000", knownGood, "0.2.0", "deployed", metav1.ConditionTrue, helmv2.UpgradeSucceededReason, 1)
	if o := Observe(back); o.LastApplied != "" || o.StillAt("web-000000000000", knownGood) {
		t.Errorf("pointed back, not rolled back yet: %+v, want no revision applied", o)
	}
	rolledBack := helmChartRelease("web-000000000000", knownGood, "0.1.0", "deployed", metav1.ConditionTrue, helmv2.UpgradeSucceededReason, 2)
	rolledBack.Status.History[0].ChartVersion = "0.2.0"
	if o := Observe(rolledBack); !o.ReadyAt("web-000000000000", knownGood) || o.ReadyAt(src, chartRev) {
		t.Errorf("rolled back: %+v, want Ready at the known-good alone", o)
	}
	// An OCIRepository's release without its digest is of no revision, whatever its version.
	oci := ready.DeepCopy()
	oci.Spec.ChartRef.Kind = "OCIRepository"
	if o := Observe(oci); o.LastApplied != "" || o.ReadyAt(src, chartRev) {
		t.Errorf("an OCIRepository's release read by its version: %+v", o)
	}
}

// hr is a HelmRelease at generation 2 pointing at source, whose latest release was of digest with
// status, and whose Ready condition is ready/reason for condGen.
func hr(source, digest, status string, ready metav1.ConditionStatus, reason string, condGen int64) *helmv2.HelmRelease {
	h := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	h.Spec.ChartRef = &helmv2.CrossNamespaceSourceReference{Kind: "OCIRepository", Name: source}
	h.Status.ObservedGeneration = condGen
	if digest != "" {
		h.Status.History = helmv2.Snapshots{
			{Version: 1, Status: "superseded", ChartVersion: "0.1.0+000000000000", OCIDigest: "sha256:0000"},
			{Version: 2, Status: status, Action: helmv2.ReleaseActionUpgrade, ChartVersion: "0.2.0", OCIDigest: digest},
		}
	}
	h.Status.Conditions = []metav1.Condition{{Type: meta.ReadyCondition, Status: ready, Reason: reason, ObservedGeneration: condGen}}
	return h
}

// What a HelmRelease says is read as a Kustomization's: Ready at the candidate when its latest
// release is of the pinned digest and Ready is True for its generation; helm-controller's failed
// install, upgrade or tests, and a remediation, are failures of the revision; its waits for the
// chart's source and for a dependency are not; nor is a failure to reach the member.
func TestObserveHelmRelease(t *testing.T) {
	const src = "web-1a2b3c4d5e6f"
	for _, tc := range []struct {
		name                    string
		hr                      *helmv2.HelmRelease
		ready, failed, unavail  bool
		waitDep, still, health0 bool
		health                  string
	}{
		{name: "released and Ready", hr: hr(src, chartDigest, "deployed", metav1.ConditionTrue, helmv2.UpgradeSucceededReason, 2),
			ready: true, still: true, health: verdict.HealthChecksPassed},
		{name: "upgrade failed", hr: hr(src, chartDigest, "failed", metav1.ConditionFalse, helmv2.UpgradeFailedReason, 2),
			failed: true, health: verdict.HealthChecksFailed},
		{name: "install failed", hr: hr(src, "", "", metav1.ConditionFalse, helmv2.InstallFailedReason, 2), failed: true, health: verdict.HealthChecksFailed},
		{name: "tests failed", hr: hr(src, chartDigest, "deployed", metav1.ConditionFalse, helmv2.TestFailedReason, 2), failed: true, health: verdict.HealthChecksFailed},
		{name: "rolled back by helm-controller", hr: hr(src, "sha256:0000", "deployed", metav1.ConditionFalse, helmv2.RollbackSucceededReason, 2),
			failed: true, health: verdict.HealthChecksFailed},
		// Even Ready True after a rollback is not Ready at the candidate: the release is of another digest.
		{name: "Ready at another digest", hr: hr(src, "sha256:0000", "deployed", metav1.ConditionTrue, helmv2.RollbackSucceededReason, 2),
			health: verdict.HealthChecksPassed},
		{name: "failure of an earlier generation", hr: hr(src, chartDigest, "failed", metav1.ConditionFalse, helmv2.UpgradeFailedReason, 1),
			health: verdict.HealthChecksFailed},
		{name: "chart source not ready", hr: hr(src, "", "", metav1.ConditionFalse, "SourceNotReady", 2), health: verdict.HealthChecksUnknown},
		{name: "chart artifact not found", hr: func() *helmv2.HelmRelease {
			h := hr(src, "", "", metav1.ConditionFalse, helmv2.ArtifactFailedReason, 2)
			h.Status.Conditions[0].Message = "Source not ready: artifact not found. Retrying in 2s"
			return h
		}(), health: verdict.HealthChecksUnknown},
		{name: "waiting for a dependency", hr: hr(src, "", "", metav1.ConditionFalse, helmv2.DependencyNotReadyReason, 2), waitDep: true, health: verdict.HealthChecksUnknown},
		{name: "member unavailable", hr: func() *helmv2.HelmRelease {
			h := hr(src, "", "", metav1.ConditionFalse, "RESTClientError", 2)
			h.Status.Conditions[0].Message = "dial tcp 10.0.0.1:6443: connect: connection refused"
			return h
		}(), unavail: true, health: verdict.HealthChecksUnknown},
		// An upgrade of the same spec (a retry, a drift correction) after a release of the
		// candidate that succeeded: judged by that release (Settled).
		{name: "upgrade of the same spec running", hr: func() *helmv2.HelmRelease {
			h := hr(src, chartDigest, "deployed", metav1.ConditionUnknown, meta.ProgressingReason, 2)
			h.Status.Conditions = append(h.Status.Conditions, metav1.Condition{Type: meta.ReconcilingCondition, Status: metav1.ConditionTrue, Reason: meta.ProgressingReason})
			return h
		}(), ready: true, still: true, health: verdict.HealthChecksProgressing},
		// The upgrade to the candidate under way: the spec's generation is not observed yet.
		{name: "upgrade to the candidate running", hr: func() *helmv2.HelmRelease {
			h := hr(src, "sha256:0000", "deployed", metav1.ConditionUnknown, meta.ProgressingReason, 2)
			h.Status.ObservedGeneration = 1
			return h
		}(), health: verdict.HealthChecksProgressing},
		{name: "no wait", hr: func() *helmv2.HelmRelease {
			h := hr(src, chartDigest, "deployed", metav1.ConditionTrue, helmv2.InstallSucceededReason, 2)
			h.Spec.Install = &helmv2.Install{DisableWait: true}
			return h
		}(), ready: true, still: true, health: verdict.HealthChecksNone},
	} {
		o := Observe(tc.hr)
		if got := o.ReadyAt(src, chartRev); got != tc.ready {
			t.Errorf("%s: ReadyAt = %v, want %v (%+v)", tc.name, got, tc.ready, o)
		}
		if got := o.FailedAt(src, chartRev); got != tc.failed {
			t.Errorf("%s: FailedAt = %v, want %v (%+v)", tc.name, got, tc.failed, o)
		}
		if got := o.UnavailableAt(src); got != tc.unavail {
			t.Errorf("%s: UnavailableAt = %v, want %v", tc.name, got, tc.unavail)
		}
		if got := o.WaitingForDependency(src); got != tc.waitDep {
			t.Errorf("%s: WaitingForDependency = %v, want %v", tc.name, got, tc.waitDep)
		}
		if got := o.StillAt(src, chartRev); got != tc.still {
			t.Errorf("%s: StillAt = %v, want %v", tc.name, got, tc.still)
		}
		if o.Health != tc.health {
			t.Errorf("%s: health %s, want %s", tc.name, o.Health, tc.health)
		}
		if o.FailedAt("web-other", chartRev) || o.ReadyAt("web-other", chartRev) {
			t.Errorf("%s: judged at a source it does not point at", tc.name)
		}
	}
	if o := Observe((*helmv2.HelmRelease)(nil)); o.Exists {
		t.Errorf("a nil HelmRelease exists: %+v", o)
	}
	// Mid-upgrade of the same spec, a release of the candidate that succeeded before is Settled.
	busy := hr(src, chartDigest, "deployed", metav1.ConditionUnknown, meta.ProgressingReason, 2)
	if ok, known := Observe(busy).Settled(src, chartRev); !ok || !known {
		t.Errorf("Settled = %v, %v", ok, known)
	}
	// The members of a map of either kind are read alike.
	w := &World{}
	w.Observe(Members(map[string]*helmv2.HelmRelease{"a": hr(src, chartDigest, "deployed", metav1.ConditionTrue, helmv2.UpgradeSucceededReason, 2), "b": nil}))
	if !w.Kustomizations["a"].ReadyAt(src, chartRev) || w.Kustomizations["b"].Exists || MemberSource(w.Objects["b"]) != "" {
		t.Errorf("world: %+v", w.Kustomizations)
	}
	var none Object
	if MemberSource(none) != "" || MemberSuspended(none) {
		t.Error("no member has a source or is suspended")
	}
}
