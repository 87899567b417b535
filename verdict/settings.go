package verdict

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"cuelang.org/go/cue"
)

// Settings is what a policy tells the engine besides the gate constraints (#Settings in
// schema/settings.cue, where every field has a default).
type Settings struct {
	// Soak is how long a wave stays healthy at the candidate before noDisruption is decided,
	// unless the wave's spec sets its own.
	Soak time.Duration `json:"soak"`
	// SampleInterval is how often workload availability is sampled during the soak.
	SampleInterval time.Duration `json:"sampleInterval"`
	// OnFail is "Hold" or "Rollback".
	OnFail string `json:"onFail"`
	// Rehearsal asks for a rollback rehearsal after the first wave.
	Rehearsal bool `json:"rehearsal"`
	// InconclusiveAfter is how long a gate may stay Inconclusive before OnInconclusive decides it.
	InconclusiveAfter time.Duration `json:"inconclusiveAfter"`
	// OnInconclusive is "Fail" or "Excuse" (the clusters that could not be observed are excused).
	OnInconclusive string `json:"onInconclusive"`
	// CatchUp paces catch-up waves.
	CatchUp CatchUpSettings `json:"catchUp"`
	// Approvals says which waves wait for an approval of the candidate revision.
	Approvals ApprovalSettings `json:"approvals"`
	// Tolerances are the numbers the policy's gate constraints refer to.
	Tolerances Tolerances `json:"tolerances"`
	// Metrics names the service metrics noDisruption reads, and how.
	Metrics MetricSettings `json:"metrics"`
	// Checks are the functional checks run on a wave's members after its switch, by name.
	Checks map[string]CheckSettings `json:"checks,omitempty"`
}

// CheckSettings is one functional check (#Settings.checks): a Job run in the member cluster, or an
// HTTP request from the hub; exactly one of Job and HTTP is set.
type CheckSettings struct {
	// Waves it runs in, by name; empty: every wave.
	Waves []string `json:"waves"`
	// Sample is how many members of a wave run it (the first by name); 0: every member.
	Sample int `json:"sample"`
	// Timeout bounds one run.
	Timeout string     `json:"timeout"`
	Job     *JobCheck  `json:"job,omitempty"`
	HTTP    *HTTPCheck `json:"http,omitempty"`
}

// JobCheck is a check run as a Job in the member cluster: it passes when the Job completes.
type JobCheck struct {
	Image   string   `json:"image"`
	Command []string `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	// Namespace is where the Job runs; empty: the template's targetNamespace, else "default".
	Namespace string `json:"namespace,omitempty"`
}

// HTTPCheck is a check run as an HTTP GET from the hub: it passes when the answer has Status (and
// holds BodyContains, when set).
type HTTPCheck struct {
	// URL, with {{cluster}} where the member's FleetCluster name goes.
	URL          string `json:"url"`
	Status       int    `json:"status"`
	BodyContains string `json:"bodyContains,omitempty"`
}

// AppliesTo tells whether the check runs in wave.
func (c CheckSettings) AppliesTo(wave string) bool {
	return len(c.Waves) == 0 || slices.Contains(c.Waves, wave)
}

// MetricSettings names the service metrics noDisruption reads (#Settings.metrics).
type MetricSettings struct {
	// ClusterLabel is the label whose value, a FleetCluster's name, says which cluster a series is of.
	ClusterLabel string `json:"clusterLabel"`
	// BaselineClusters is how many clusters still at the known-good are queried as the baseline.
	BaselineClusters int `json:"baselineClusters"`
	// Queries are PromQL expressions by name, each with {{clusters}} where a regular expression
	// matching the queried clusters' names goes, grouped by ClusterLabel.
	Queries map[string]string `json:"queries,omitempty"`
}

// OnInconclusiveExcuse is settings.onInconclusive's value that excuses the clusters a gate could
// not observe once inconclusiveAfter has passed.
const OnInconclusiveExcuse = "Excuse"

// CatchUpSettings paces catch-up waves.
type CatchUpSettings struct {
	// MaxConcurrent is the most clusters one catch-up wave takes.
	MaxConcurrent int `json:"maxConcurrent"`
}

// ApprovalSettings says which waves wait for an approval of the candidate revision.
type ApprovalSettings struct {
	// Waves by name, in every rollout.
	Waves []string `json:"waves"`
	// Classes of rollouts whose every wave waits for an approval.
	Classes []string `json:"classes"`
}

// settingsJSON is Settings as a policy writes it: durations as Go duration strings.
type settingsJSON struct {
	Soak           string                   `json:"soak"`
	SampleInterval string                   `json:"sampleInterval"`
	OnFail         string                   `json:"onFail"`
	Rehearsal      bool                     `json:"rehearsal"`
	Inconclusive   string                   `json:"inconclusiveAfter"`
	OnInconclusive string                   `json:"onInconclusive"`
	CatchUp        CatchUpSettings          `json:"catchUp"`
	Approvals      ApprovalSettings         `json:"approvals"`
	Tolerances     Tolerances               `json:"tolerances"`
	Metrics        MetricSettings           `json:"metrics"`
	Checks         map[string]CheckSettings `json:"checks,omitempty"`
}

// MarshalJSON writes durations as Go duration strings ("1m0s"), the way policies write them.
func (s Settings) MarshalJSON() ([]byte, error) {
	return json.Marshal(settingsJSON{s.Soak.String(), s.SampleInterval.String(), s.OnFail, s.Rehearsal, s.InconclusiveAfter.String(), s.OnInconclusive, s.CatchUp, s.Approvals, s.Tolerances, s.Metrics, s.Checks})
}

// NeedsApproval reports whether a wave of a rollout of the given class waits for an approval.
func (a ApprovalSettings) NeedsApproval(class, wave string) bool {
	for _, c := range a.Classes {
		if c == class {
			return true
		}
	}
	for _, w := range a.Waves {
		if w == wave {
			return true
		}
	}
	return false
}

// Tolerances are the numbers a policy's gate constraints refer to.
type Tolerances struct {
	MinAvailableRatio     float64 `json:"minAvailableRatio"`
	MaxUnavailableSeconds float64 `json:"maxUnavailableSeconds"`
	MaxRehearsalSeconds   float64 `json:"maxRehearsalSeconds"`
	MinSampleCoverage     float64 `json:"minSampleCoverage"`
	// MaxErrorRatio and MaxToBaseline are what the default policy holds the errorRatio and
	// latencyP95 queries to: an error ratio at most MaxErrorRatio, and each at most MaxToBaseline
	// times the baseline's.
	MaxErrorRatio float64 `json:"maxErrorRatio"`
	MaxToBaseline float64 `json:"maxToBaseline"`
}

// Settings reads the policy's settings, with #Settings' defaults for what it leaves out. It
// returns a *PolicyError when they are invalid or not concrete.
func (p *Policy) Settings() (s Settings, err error) {
	defer recoverInto(&err, "reading the policy's settings")
	ctx := newContext()
	root, err := p.compile(ctx)
	if err != nil {
		return Settings{}, p.policyError(err)
	}
	v := withSettings(root).LookupPath(cue.MakePath(cue.Str(settingsField)))
	if err := v.Validate(cue.Concrete(true)); err != nil {
		return Settings{}, p.policyError(err)
	}
	var raw settingsJSON
	if err := v.Decode(&raw); err != nil {
		return Settings{}, p.policyError(err)
	}
	s = Settings{OnFail: raw.OnFail, Rehearsal: raw.Rehearsal, OnInconclusive: raw.OnInconclusive, CatchUp: raw.CatchUp,
		Approvals: raw.Approvals, Tolerances: raw.Tolerances, Metrics: raw.Metrics, Checks: raw.Checks}
	if s.Soak, err = time.ParseDuration(raw.Soak); err != nil {
		return Settings{}, &PolicyError{Digest: p.digest, Problems: []string{fmt.Sprintf("settings.soak: %v", err)}}
	}
	if s.Soak <= 0 {
		// A wave that does not soak is judged on no samples: noDisruption would be vacuous.
		return Settings{}, &PolicyError{Digest: p.digest, Problems: []string{fmt.Sprintf(
			"settings.soak: %q: a wave must soak for longer than 0s, or noDisruption is decided on no samples; set a positive soak such as \"1m\"", raw.Soak)}}
	}
	if s.SampleInterval, err = time.ParseDuration(raw.SampleInterval); err != nil {
		return Settings{}, &PolicyError{Digest: p.digest, Problems: []string{fmt.Sprintf("settings.sampleInterval: %v", err)}}
	}
	if s.InconclusiveAfter, err = time.ParseDuration(raw.Inconclusive); err != nil {
		return Settings{}, &PolicyError{Digest: p.digest, Problems: []string{fmt.Sprintf("settings.inconclusiveAfter: %v", err)}}
	}
	var problems []string
	for _, b := range []struct {
		field    string
		raw      string
		d        time.Duration
		min, max time.Duration
		why      string
	}{
		{"soak", raw.Soak, s.Soak, 0, MaxSoak, "a longer soak keeps a wave in flight for longer than any release is watched; hold the rollout to keep a wave for longer"},
		{"sampleInterval", raw.SampleInterval, s.SampleInterval, MinSampleInterval, MaxSampleInterval, "workloads are sampled at least every 10m and at most every second: more often loads every member's API server, less often misses disruptions"},
		{"inconclusiveAfter", raw.Inconclusive, s.InconclusiveAfter, MinInconclusiveAfter, MaxSoak, "a gate waits at least 30s for evidence before it fails (0s would never fail it) and at most 168h"},
	} {
		if b.d < b.min || b.d > b.max {
			problems = append(problems, fmt.Sprintf("settings.%s: %q is outside %s to %s: %s", b.field, b.raw, b.min, b.max, b.why))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Checks)) {
		c := s.Checks[name]
		if (c.Job == nil) == (c.HTTP == nil) {
			problems = append(problems, fmt.Sprintf("settings.checks.%s: give it exactly one of job (a Job run in the member) and http (a request from the hub)", name))
		}
		if d, err := time.ParseDuration(c.Timeout); err != nil || d <= 0 || d > MaxCheckTimeout {
			problems = append(problems, fmt.Sprintf("settings.checks.%s.timeout: %q is not a duration above 0s and at most %s", name, c.Timeout, MaxCheckTimeout))
		}
	}
	if len(problems) > 0 {
		return Settings{}, &PolicyError{Digest: p.digest, Problems: problems}
	}
	return s, nil
}

// Bounds of the policy's durations, checked as its settings are read. MaxSoak is also the bound of
// a wave's spec.waves[].soak, which the FleetRollout CRD enforces (168h, written there as a literal).
const (
	MaxSoak              = 168 * time.Hour
	MinSampleInterval    = time.Second
	MaxSampleInterval    = 10 * time.Minute
	MinInconclusiveAfter = 30 * time.Second
	MaxCheckTimeout      = time.Hour
)

// withSettings unifies the policy's settings (present or not) with #Settings, so that its
// defaults apply wherever a gate refers to a setting.
func withSettings(root cue.Value) cue.Value {
	return root.FillPath(cue.MakePath(cue.Str(settingsField)), root.LookupPath(cue.MakePath(cue.Def(settingsDef))))
}

// ExpectedSamples is how many samples a soak takes at interval: soak / interval, at least 1.
func ExpectedSamples(soak, interval time.Duration) int {
	if interval <= 0 {
		return 1
	}
	return max(1, int(soak/interval))
}

// RequiredSamples is how many samples that read every workload a cluster needs over a soak to be
// observed enough to judge: minSampleCoverage of ExpectedSamples, rounded up, at least 1. The
// built-in policy requires the same.
func (s Settings) RequiredSamples(soak time.Duration) int {
	cov := s.Tolerances.MinSampleCoverage
	if cov <= 0 || cov > 1 {
		cov = 1
	}
	return max(1, int(math.Ceil(float64(ExpectedSamples(soak, s.SampleInterval))*cov-1e-9)))
}
