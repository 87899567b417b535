package engine

import (
	"encoding/json"
	"fmt"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/verdict"
)

// ClusterValuesAnnotation records on a HelmRelease the spec.values of the FleetCluster it was
// written for, as JSON: the HelmRelease's spec.values has them merged into the chart's values at
// their dotted paths, which cannot be taken apart again, and a rollback of a cluster whose
// FleetCluster was deleted rebuilds it from them (departed), as it rebuilds a Kustomization's from
// its postBuild. FleetCluster values are not secret: they are in the FleetCluster's spec.
const ClusterValuesAnnotation = "tidegate.dev/cluster-values"

// DesiredHelmRelease is the HelmRelease that makes cluster fc run t, for a rollout of a Helm chart
// (spec.chart): the chart the pinned source t.Source serves (spec.chartRef, of the rollout's source
// kind: an OCIRepository, or a HelmChart of a HelmRepository), installed on
// the member (fc's kubeconfig) as release fr.ReleaseName() in fr.ReleaseNamespace(), where Helm
// stores it too, with the chart's values of t.Build and fc's values set at their dotted paths
// (ChartValues). Its name, labels, annotations and owner are those a Kustomization would have. The
// template's interval, timeout, retryInterval, wait, serviceAccountName and dependsOn are the spec's,
// as for a Kustomization.
//
// A failed install or upgrade is retried at the retryInterval (strategy RetryOnFailure) and never
// remediated: helm-controller neither uninstalls nor rolls back the release by itself. tidegate
// decides what a failure means and performs the rollback (it points the HelmRelease at the
// known-good's pinned source), so a failure must stay visible as what it is: Ready=False with
// reason InstallFailed or UpgradeFailed, at the candidate's digest (Observation.FailedAt). A
// remediation would make the member run the previous release while the HelmRelease points at the
// candidate, and helm-controller's remediation retries would stall it (RetriesExceeded) where a
// member that did not answer for a moment should be tried again, as kustomize-controller tries a
// Kustomization again.
//
// A chart from a GitRepository (a chart directory in a repository) is not written: it needs a
// HelmChart of the GitRepository, whose artifact revision names the chart's version and not the
// commit, and the revision a member runs could not be told apart from another commit's (see
// ChartSourceRefused).
func DesiredHelmRelease(fr *v1alpha1.FleetRollout, fc *v1alpha1.FleetCluster, tg Target) (*helmv2.HelmRelease, error) {
	if why := ChartSourceRefused(fr); why != "" {
		return nil, fmt.Errorf("%s", why)
	}
	fr = fr.Built(tg.Build)
	t := fr.Spec.Template
	values, err := fr.ChartValues(fc)
	if err != nil {
		return nil, err
	}
	hr := &helmv2.HelmRelease{
		TypeMeta:   metav1.TypeMeta{APIVersion: helmv2.GroupVersion.String(), Kind: helmv2.HelmReleaseKind},
		ObjectMeta: memberMeta(fr, fc, tg),
		Spec: helmv2.HelmReleaseSpec{
			ChartRef:         &helmv2.CrossNamespaceSourceReference{Kind: fr.Spec.SourceRef.Kind, Name: tg.Source},
			Interval:         durationOr(t.Interval, defaultKustomizationInterval),
			Timeout:          &metav1.Duration{Duration: durationOr(t.Timeout, defaultKustomizationTimeout).Duration},
			ReleaseName:      fr.ReleaseName(),
			TargetNamespace:  fr.ReleaseNamespace(),
			StorageNamespace: fr.ReleaseNamespace(),
			// helm-controller impersonates the service account in the HelmRelease's namespace: the
			// rollout's.
			ServiceAccountName: t.ServiceAccountName,
			DependsOn:          dependsOn(t, fc.Name),
			Install: &helmv2.Install{
				CreateNamespace: true,
				DisableWait:     !boolOr(t.Wait, true),
				Strategy:        &helmv2.InstallStrategy{Name: string(helmv2.ActionStrategyRetryOnFailure), RetryInterval: retryInterval(t)},
			},
			Upgrade: &helmv2.Upgrade{
				DisableWait: !boolOr(t.Wait, true),
				Strategy:    &helmv2.UpgradeStrategy{Name: string(helmv2.ActionStrategyRetryOnFailure), RetryInterval: retryInterval(t)},
			},
		},
	}
	if values != nil {
		raw, err := json.Marshal(values)
		if err != nil {
			return nil, fmt.Errorf("the chart values of FleetCluster %s/%s: %w", fc.Namespace, fc.Name, err)
		}
		hr.Spec.Values = &apiextensionsv1.JSON{Raw: raw}
	}
	if len(fc.Spec.Values) > 0 {
		raw, err := json.Marshal(fc.Spec.Values)
		if err != nil {
			return nil, fmt.Errorf("the values of FleetCluster %s/%s: %w", fc.Namespace, fc.Name, err)
		}
		hr.Annotations[ClusterValuesAnnotation] = string(raw)
	}
	if fc.Spec.KubeConfig != nil {
		hr.Spec.KubeConfig = fc.Spec.KubeConfig.DeepCopy()
	}
	return hr, nil
}

// ChartSourceRefused says why tidegate does not install fr's chart from its source, "" when it
// does (fr is no chart, or its chart is the artifact of an OCIRepository or of a HelmChart). A
// HelmChart's own source (a HelmRepository, not a GitRepository) is the controllers' to check:
// the rollout does not name it.
func ChartSourceRefused(fr *v1alpha1.FleetRollout) string {
	if !fr.IsChart() || fr.Spec.SourceRef.Kind == sourcev1.OCIRepositoryKind || fr.Spec.SourceRef.Kind == sourcev1.HelmChartKind {
		return ""
	}
	return fmt.Sprintf("FleetRollout %s/%s: spec.chart with a %s source is not supported: tidegate installs a chart from an OCIRepository or a HelmChart of a HelmRepository, "+
		"whose digest names the revision each member runs; push the chart with helm push and point spec.sourceRef at an OCIRepository of it "+
		"(layerSelector mediaType application/vnd.cncf.helm.chart.content.v1.tar+gzip, operation copy), or serve it from a HelmRepository "+
		"and point spec.sourceRef at a HelmChart of it", fr.Namespace, fr.Name, fr.Spec.SourceRef.Kind)
}

// helmReleaseBuild are the fields of a HelmRelease that shape what helm-controller installs on its
// cluster, and where (buildHash): the chart's source, the release's name and namespaces, the
// values and the kubeconfig. The rest (interval, timeout, retries, wait, service account,
// dependencies, labels) says how, when and as whom it installs and checks it, not what.
func helmReleaseBuild(hr *helmv2.HelmRelease) []any {
	s := &hr.Spec
	return []any{s.ChartRef, s.Chart, s.ReleaseName, s.TargetNamespace, s.StorageNamespace, s.Values, s.KubeConfig}
}

// observeHelmRelease is what a HelmRelease says about the revision it runs, read as a
// Kustomization's is (Observation), so that every decision reads either kind alike:
//   - Source is spec.chartRef's name (the pinned source of a revision); Current and ReadyCurrent
//     compare status.observedGeneration and the Ready condition's with the generation.
//   - LastApplied, LastReconciled: the OCI artifact digest helm-controller released last
//     (status.history's latest snapshot, ociDigest "sha256:<hex>"), which SameRevision matches
//     against the pinned source's revision "<tag>@sha256:<hex>"; a release that failed is
//     recorded too, as a Kustomization's lastAppliedRevision is of an apply whose health checks
//     failed. A chart of a HelmChart has no ociDigest: its snapshot's chartVersion is read as a
//     revision (chartRefRevision). LastAttempted is status.lastAttemptedRevisionDigest, or for a
//     HelmChart status.lastAttemptedRevision read so. LastReconciledStatus is
//     ReconciliationSucceeded for a release deployed (or since superseded), else the failed
//     action's reason (InstallFailed, UpgradeFailed).
//   - Health: helm-controller waits for the release's resources unless the template says wait:
//     false (install.disableWait), so Ready True is installed and healthy (Passed); a release that
//     failed is Failed, one under way Progressing; without wait, None.
//   - Progressing: Ready Unknown, or Reconciling True, with reason Progressing (a release action
//     running), and Ready not False. A retry after a failure (ProgressingWithRetry) is not: Ready
//     then says the failure.
func observeHelmRelease(hr *helmv2.HelmRelease) Observation {
	o := Observation{
		Exists:        true,
		Source:        MemberSource(hr),
		Current:       hr.Status.ObservedGeneration == hr.Generation,
		LastAttempted: hr.Status.LastAttemptedRevisionDigest,
		Health:        verdict.HealthChecksNone,
	}
	progressing := o.readConditions(hr.Status.Conditions, hr.Generation)
	if hr.Spec.Install == nil || !hr.Spec.Install.DisableWait {
		switch {
		case o.Ready == metav1.ConditionTrue:
			o.Health = verdict.HealthChecksPassed
		case o.Ready == metav1.ConditionFalse && releaseFailed(o.Reason):
			o.Health = verdict.HealthChecksFailed
		case progressing:
			o.Health = verdict.HealthChecksProgressing
		default:
			o.Health = verdict.HealthChecksUnknown
		}
	}
	o.Progressing = progressing && o.Ready != metav1.ConditionFalse
	if chartRefKind(hr) == sourcev1.HelmChartKind {
		o.LastAttempted = chartRefRevision(hr, hr.Status.LastAttemptedRevision)
	}
	if s := latestSnapshot(hr.Status.History); s != nil {
		o.LastApplied, o.LastReconciled = s.OCIDigest, s.OCIDigest
		if s.OCIDigest == "" && chartRefKind(hr) == sourcev1.HelmChartKind {
			o.LastApplied = chartRefRevision(hr, s.ChartVersion)
			o.LastReconciled = o.LastApplied
		}
		switch s.Status {
		case "deployed", "superseded":
			o.LastReconciledStatus = meta.ReconciliationSucceededReason
		case "failed":
			o.LastReconciledStatus = helmv2.UpgradeFailedReason
			if s.Action == helmv2.ReleaseActionInstall {
				o.LastReconciledStatus = helmv2.InstallFailedReason
			}
		default:
			o.LastReconciledStatus = s.Status
		}
	}
	return o
}

// chartRefKind is the kind of the source hr's spec.chartRef names, "" when it has none.
func chartRefKind(hr *helmv2.HelmRelease) string {
	if hr.Spec.ChartRef == nil {
		return ""
	}
	return hr.Spec.ChartRef.Kind
}

// chartRefRevision is the revision a HelmRelease of a HelmChart released when helm-controller
// recorded chart version version: the revision tidegate wrote it for (its RevisionAnnotation,
// "<version>@<digest>", whose ref is the chart's version), when version is that revision's;
// else "", a release of another revision. helm-controller records no digest for a HelmChart's
// chart (ociDigest is an OCIRepository's), only the version; the revision is told by what points
// at it: tidegate writes the annotation and spec.chartRef together, chartRef naming the revision's
// pinned HelmChart (its name is unique to the revision's digest) whose spec.version is that
// version, so a release of the version made from the current spec is a release of the revision.
// The decisions check the rest, as for an OCIRepository's digest: the member's source
// (Observation.Source) is the revision's pinned source, and ReadyAt, FailedAt and Settled that
// its status is of the current generation, which a release made from an earlier spec is not. Two
// revisions of one version (a version published again with other content) are told apart by
// their pinned sources' names, not by the release: helm-controller does not upgrade a release to
// the version it already has.
func chartRefRevision(hr *helmv2.HelmRelease, version string) string {
	revision := hr.Annotations[v1alpha1.RevisionAnnotation]
	ref, _, err := SplitRevision(revision)
	if version == "" || err != nil || ref != version {
		return ""
	}
	return revision
}

// latestSnapshot is the snapshot of the highest release version. Snapshots.Latest sorts the
// history in place, which an object of the manager's cache, shared by every reader, must not be.
func latestSnapshot(history helmv2.Snapshots) *helmv2.Snapshot {
	var latest *helmv2.Snapshot
	for _, s := range history {
		if s != nil && (latest == nil || s.Version > latest.Version) {
			latest = s
		}
	}
	return latest
}

// releaseFailed tells the reasons of helm-controller's Ready=False that say the release of the
// chart itself failed, or was undone: its install, upgrade or tests failed, or it was remediated
// (rolled back or uninstalled, which tidegate never asks for, but a HelmRelease edited by someone
// else may): none of them runs the revision, healthy.
func releaseFailed(reason string) bool {
	switch reason {
	case helmv2.InstallFailedReason, helmv2.UpgradeFailedReason, helmv2.TestFailedReason,
		helmv2.RollbackSucceededReason, helmv2.RollbackFailedReason, helmv2.UninstallSucceededReason, helmv2.UninstallFailedReason:
		return true
	}
	return false
}
