package verdict

import (
	"fmt"
	"strings"
	"time"
)

// The Go side of the evidence schemas in schema/*.cue. Collectors fill these and hand them to
// Evaluate; a test keeps every JSON field here in step with a field of the schema. Lists are
// omitted when empty (the schema reads an absent list as empty), so nil slices are fine.

// Evidence is what every gate's evidence carries (#Evidence).
type Evidence struct {
	// Rollout is "<namespace>/<name>".
	Rollout string `json:"rollout"`
	// Wave is the wave the evidence is about.
	Wave      string    `json:"wave"`
	Candidate Revision  `json:"candidate"`
	KnownGood *Revision `json:"knownGood,omitempty"`
	// Targets are the clusters the evidence covers, sorted.
	Targets     []string  `json:"targets,omitempty"`
	CollectedAt time.Time `json:"collectedAt"`
	// Limits say what the evidence does not establish.
	Limits []string `json:"limits,omitempty"`
	// Unobserved are the targets whose evidence could not be collected in full (Evaluate then
	// tells Inconclusive from Fail), and evidence about no one target that could not be.
	Unobserved []Unobserved `json:"unobserved,omitempty"`
}

// Revision is a revision with its artifact digest (#Revision); Digest is empty for a candidate
// whose artifact source-controller refused.
type Revision struct {
	Revision string `json:"revision"`
	Digest   string `json:"digest,omitempty"`
}

// ObjectRef names one Kubernetes object (#ObjectRef); Namespace is "" for a cluster-scoped one.
type ObjectRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
}

// MaxRenderedObjects is #MaxObjects: how many rendered objects deploySafe evidence may list.
const MaxRenderedObjects = 5000

// DeploySafeEvidence is #DeploySafeEvidence.
type DeploySafeEvidence struct {
	Evidence
	Source    SourceEvidence    `json:"source"`
	Render    RenderEvidence    `json:"render"`
	Install   InstallEvidence   `json:"install"`
	Preflight PreflightEvidence `json:"preflight"`
}

// SourceEvidence is the candidate's provenance.
type SourceEvidence struct {
	Verified bool `json:"verified"`
	// Verification is the provider ("cosign", ...), "" when the source asks for none.
	Verification string `json:"verification"`
	// Revision is the revision whose signature was verified: the artifact revision of the
	// candidate's pinned source, which names one digest (OCI) or commit (Git). Empty when not
	// verified.
	Revision string `json:"revision,omitempty"`
	Message  string `json:"message,omitempty"`
}

// RenderEvidence is the kustomize build of the candidate, or its chart's render: the first
// MaxRenderedObjects objects, sorted, with how many there were and how many are left out.
type RenderEvidence struct {
	OK        bool        `json:"ok"`
	Error     string      `json:"error,omitempty"`
	Objects   []ObjectRef `json:"objects,omitempty"`
	Total     int         `json:"total"`
	Truncated int         `json:"truncated"`
	// Chart is the chart rendered, for a rollout of a Helm chart (spec.chart).
	Chart *ChartRef `json:"chart,omitempty"`
}

// ChartRef is #ChartRef: a Helm chart's name and version, the version as helm-controller records
// it, with the digest of the chart's OCI artifact as build metadata ("0.1.0+0123456789ab").
type ChartRef struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// InstallEvidence is the check of install-time values against the package's install schema: the
// rollout's values for the targets that set none of their own, and Clusters, each target that sets
// values of its own and has a finding.
type InstallEvidence struct {
	Schema        bool              `json:"schema"`
	UnknownKeys   []string          `json:"unknownKeys,omitempty"`
	ProtectedKeys []string          `json:"protectedKeys,omitempty"`
	Violations    []string          `json:"violations,omitempty"`
	Clusters      []InstallFindings `json:"clusters,omitempty"`
}

// InstallFindings is #InstallFindings: the check of one target's own install-time values.
type InstallFindings struct {
	Name          string   `json:"name"`
	UnknownKeys   []string `json:"unknownKeys,omitempty"`
	ProtectedKeys []string `json:"protectedKeys,omitempty"`
	Violations    []string `json:"violations,omitempty"`
}

// PreflightEvidence is the preflight of the wave's targets (#WavePreflight) and, on the first
// wave, of every later wave's planned targets.
type PreflightEvidence struct {
	WavePreflight
	LaterWaves []WavePreflight `json:"laterWaves,omitempty"`
}

// WavePreflight is #WavePreflight: one wave's targets, its failure budget, and the targets whose
// preflight failed (FailedPreflights).
type WavePreflight struct {
	// Name is the wave; empty for the wave the evidence is about.
	Name        string             `json:"name,omitempty"`
	MaxFailures int                `json:"maxFailures"`
	Clusters    []ClusterPreflight `json:"clusters,omitempty"`
	Failed      []string           `json:"failed,omitempty"`
}

// Failed tells whether the preflight of a cluster found a problem: not reachable, an API not
// served, a dry-run rejection. The schema derives #WavePreflight.failed the same way.
func (c ClusterPreflight) Failed() bool {
	return !c.Reachable || len(c.MissingAPIs) > 0 || len(c.DryRunErrors) > 0
}

// Problem says in one line why a cluster's preflight failed, "" when it did not.
func (c ClusterPreflight) Problem() string {
	var parts []string
	if !c.Reachable {
		why := "unreachable"
		if c.Unreachable != "" {
			why += ": " + c.Unreachable
		}
		parts = append(parts, why)
	}
	if n := len(c.MissingAPIs); n > 0 {
		parts = append(parts, fmt.Sprintf("%d API(s) not served: %s", n, c.MissingAPIs[0]))
	}
	if n := len(c.DryRunErrors); n > 0 {
		parts = append(parts, fmt.Sprintf("%d dry-run rejection(s): %s", n, c.DryRunErrors[0]))
	}
	return strings.Join(parts, "; ")
}

// NewWavePreflight is the preflight of one wave with Failed filled from its clusters.
func NewWavePreflight(name string, maxFailures int, clusters []ClusterPreflight) WavePreflight {
	w := WavePreflight{Name: name, MaxFailures: maxFailures, Clusters: clusters}
	for _, c := range clusters {
		if c.Failed() {
			w.Failed = append(w.Failed, c.Name)
		}
	}
	return w
}

// ClusterPreflight is #Preflight.
type ClusterPreflight struct {
	Name          string   `json:"name"`
	Reachable     bool     `json:"reachable"`
	Unreachable   string   `json:"unreachable,omitempty"`
	ServerVersion string   `json:"serverVersion"`
	MissingAPIs   []string `json:"missingAPIs,omitempty"`
	DryRunErrors  []string `json:"dryRunErrors,omitempty"`
}

// NoDisruptionEvidence is #NoDisruptionEvidence. Soak and SampleInterval are Go durations
// (time.Duration.String()).
type NoDisruptionEvidence struct {
	Evidence
	Soak           string `json:"soak"`
	SampleInterval string `json:"sampleInterval"`
	MaxFailures    int    `json:"maxFailures"`
	// ExpectedSamples is the time soaked so far, up to Soak, over SampleInterval; at least 1.
	ExpectedSamples int                 `json:"expectedSamples"`
	HeldBack        []HeldBack          `json:"heldBack,omitempty"`
	Clusters        []ClusterContinuity `json:"clusters,omitempty"`
	// Metrics says how the policy's metric queries were asked, when it names any.
	Metrics *MetricsEvidence `json:"metrics,omitempty"`
}

// MetricsEvidence is #MetricsEvidence: how the wave's service metrics were queried, and the baseline.
type MetricsEvidence struct {
	// Start and End bound the window the queries covered (RFC 3339), Step their resolution.
	Start string `json:"start"`
	End   string `json:"end"`
	Step  string `json:"step"`
	// Queries are the policy's, as written (with {{clusters}}).
	Queries map[string]string `json:"queries"`
	// Baseline is, by query, the same query over clusters still at the known-good.
	Baseline map[string]Baseline `json:"baseline,omitempty"`
	// BaselineUnset names the queries that have no baseline, and why.
	BaselineUnset []Unobserved `json:"baselineUnset,omitempty"`
}

// Baseline is #Baseline: one query over the baseline's clusters together.
type Baseline struct {
	MetricSummary
	// Kind is BaselineNotYetUpdated or BaselineBeforeSwitch.
	Kind     string   `json:"kind"`
	Clusters []string `json:"clusters"`
	Start    string   `json:"start"`
	End      string   `json:"end"`
}

// The kinds of a baseline: clusters still at the known-good over the wave's own window, or, when
// none is left, the wave's clusters over the window of the same length before they were switched.
const (
	BaselineNotYetUpdated = "notYetUpdated"
	BaselineBeforeSwitch  = "beforeSwitch"
)

// MeasureMetric is how a cluster's unset names a metric query that has no value for it.
func MeasureMetric(query string) string { return "metrics." + query }

// HeldBack is #HeldBack: a member the wave did not switch, because its preflight failed.
type HeldBack struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Health-check outcomes of a per-cluster Kustomization (#ClusterContinuity.healthChecks).
const (
	HealthChecksPassed  = "Passed"
	HealthChecksFailed  = "Failed"
	HealthChecksUnknown = "Unknown"
	// HealthChecksProgressing: kustomize-controller is running the health checks now.
	HealthChecksProgressing = "Progressing"
	HealthChecksNone        = "None"
)

// ClusterContinuity is #ClusterContinuity: one cluster's soak, summarised.
type ClusterContinuity struct {
	Name     string `json:"name"`
	Ready    bool   `json:"ready"`
	Revision string `json:"revision"`
	// MinAvailableRatio and UnavailableSeconds are nil when they were not measured (no sample read
	// any workload); Unset then names them. SetAvailability sets all three.
	MinAvailableRatio  *float64 `json:"minAvailableRatio,omitempty"`
	UnavailableSeconds *float64 `json:"unavailableSeconds,omitempty"`
	Unset              []string `json:"unset,omitempty"`
	Samples            int      `json:"samples"`
	FailedSamples      int      `json:"failedSamples"`
	ObservedSamples    int      `json:"observedSamples"`
	HealthChecks       string   `json:"healthChecks"`
	// Transient is what kustomize-controller was doing, when it was between two outcomes.
	Transient string `json:"transient,omitempty"`
	// Metrics are the policy's metric queries' summaries for this cluster, by query; a query with
	// no value for it is named in Unset (MeasureMetric).
	Metrics map[string]MetricSummary `json:"metrics,omitempty"`
	// Checks are the results of the functional checks that ran on this cluster, by check; a check
	// that could not run (or not finish) is named in Unset instead (MeasureCheck).
	Checks map[string]CheckResult `json:"checks,omitempty"`
}

// CheckResult is #CheckResult: one functional check's run on one cluster.
type CheckResult struct {
	// Result is CheckPassed or CheckFailed.
	Result  string `json:"result"`
	Message string `json:"message"`
	// Logs is the tail of a Job's logs, when they could be read.
	Logs string `json:"logs,omitempty"`
}

// The results of a functional check that ran.
const (
	CheckPassed = "Passed"
	CheckFailed = "Failed"
)

// MeasureCheck is how a cluster's unset names a check that could not run there.
func MeasureCheck(check string) string { return "checks." + check }

// MetricSummary is #MetricSummary: what the evidence keeps of one query's points for one cluster,
// or for a baseline's clusters together.
type MetricSummary struct {
	Count int     `json:"count"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
	Last  float64 `json:"last"`
}

// The measures of #ClusterContinuity that its unset can name, sorted.
const (
	MeasureMinAvailableRatio  = "minAvailableRatio"
	MeasureUnavailableSeconds = "unavailableSeconds"
)

// SetAvailability records the cluster's availability measures when measured, and otherwise
// leaves them absent and names them in Unset: a measurement that was not taken has no value.
func (c *ClusterContinuity) SetAvailability(measured bool, minAvailableRatio, unavailableSeconds float64) {
	if !measured {
		c.MinAvailableRatio, c.UnavailableSeconds = nil, nil
		c.Unset = []string{MeasureMinAvailableRatio, MeasureUnavailableSeconds}
		return
	}
	c.MinAvailableRatio, c.UnavailableSeconds, c.Unset = &minAvailableRatio, &unavailableSeconds, nil
}

// RollbackSafeEvidence is #RollbackSafeEvidence.
type RollbackSafeEvidence struct {
	Evidence
	FirstRollout       bool      `json:"firstRollout"`
	PrunedStateful     []Finding `json:"prunedStateful,omitempty"`
	ChangedStateful    []Finding `json:"changedStateful,omitempty"`
	CRDChanges         []Finding `json:"crdChanges,omitempty"`
	ImmutableRecreates []Finding `json:"immutableRecreates,omitempty"`
	Irreversible       []Finding `json:"irreversible,omitempty"`
}

// Changes a Finding describes, from the known-good to the candidate.
const (
	ChangeRemoved = "removed"
	ChangeChanged = "changed"
	ChangeAdded   = "added"
)

// Finding is #Finding: one rollbackSafe concern about one object, as package evidence classifies
// it; Approved is set by the engine from spec.approvals.
type Finding struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Field      string `json:"field"`
	Change     string `json:"change"`
	Reason     string `json:"reason"`
	Approved   bool   `json:"approved"`
}

// RollbackSucceedsEvidence is #RollbackSucceedsEvidence.
type RollbackSucceedsEvidence struct {
	Evidence
	FirstRollout    bool               `json:"firstRollout"`
	KnownGoodSource *KnownGoodSource   `json:"knownGoodSource,omitempty"`
	Rehearsal       *RehearsalEvidence `json:"rehearsal,omitempty"`
}

// KnownGoodSource is the known-good revision's pinned source, as observed now.
type KnownGoodSource struct {
	Name           string `json:"name"`
	Exists         bool   `json:"exists"`
	Ready          bool   `json:"ready"`
	ServedDigest   string `json:"servedDigest"`
	RecordedDigest string `json:"recordedDigest"`
	Renders        bool   `json:"renders"`
	RenderError    string `json:"renderError,omitempty"`
}

// RehearsalEvidence is the rollback rehearsal on the first wave.
type RehearsalEvidence struct {
	Required bool          `json:"required"`
	Done     bool          `json:"done"`
	Rollback *RehearsalLeg `json:"rollback,omitempty"`
	Forward  *RehearsalLeg `json:"forward,omitempty"`
}

// RehearsalLeg is one switch of the wave and the health check after it.
type RehearsalLeg struct {
	OK      bool    `json:"ok"`
	Seconds float64 `json:"seconds"`
	Message string  `json:"message,omitempty"`
	// Checks are the policy's functional checks run at the leg's revision once it was Ready (the
	// way back's, today).
	Checks []RehearsalCheck `json:"checks,omitempty"`
}

// RehearsalCheck is #RehearsalCheck: one functional check's run on one cluster in a rehearsal.
type RehearsalCheck struct {
	Cluster string `json:"cluster"`
	Check   string `json:"check"`
	Result  string `json:"result"`
	Message string `json:"message"`
}
