package verdict

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// unchecked returns a policy that skipped LoadPolicy's checks, to show what Evaluate does on its
// own with a policy that would not load.
func unchecked(t *testing.T, files map[string]string) *Policy {
	t.Helper()
	m := map[string][]byte{}
	for n, s := range files {
		m[n] = []byte(s)
	}
	p, err := newPolicy(m, "sha256:")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const acceptAll = `package policy
deploySafe: #DeploySafeEvidence
noDisruption: #NoDisruptionEvidence
rollbackSafe: #RollbackSafeEvidence
rollbackSucceeds: #RollbackSucceedsEvidence
`

type panicky struct{}

func (panicky) MarshalJSON() ([]byte, error) { panic("collector bug") }

func noDisruptionFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(evidenceDir, GateNoDisruption, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEvaluateEdges(t *testing.T) {
	def := DefaultPolicy()
	pass := noDisruptionFixture(t, "pass")
	var nilEvidence *NoDisruptionEvidence
	oversized := []byte(`{"limits": ["` + strings.Repeat("x", MaxEvidenceBytes) + `"]}`)

	tests := []struct {
		name     string
		policy   *Policy
		gate     string
		evidence any
		pass     bool
		reason   string // a reason that must be there (substring)
		err      string // the error must contain it; "" means no error
		policyEr bool   // the error is a *PolicyError
	}{
		{name: "passing evidence", policy: def, gate: GateNoDisruption, evidence: pass, pass: true},
		{name: "json.RawMessage", policy: def, gate: GateNoDisruption, evidence: json.RawMessage(pass), pass: true},
		{name: "nil evidence fails", policy: def, gate: GateNoDisruption, evidence: nil, reason: "no evidence was collected"},
		{name: "typed nil evidence fails", policy: def, gate: GateNoDisruption, evidence: nilEvidence, reason: "no evidence was collected"},
		{name: "JSON null fails", policy: def, gate: GateNoDisruption, evidence: []byte(" null\n"), reason: "no evidence was collected"},
		{name: "empty bytes fail", policy: def, gate: GateNoDisruption, evidence: []byte{}, reason: "no evidence was collected"},
		{name: "evidence that is not an object fails", policy: def, gate: GateNoDisruption, evidence: []string{"a"}, reason: "(mismatched types "},
		{name: "oversized evidence is an error", policy: def, gate: GateNoDisruption, evidence: oversized, err: "collect per-wave summaries"},
		{name: "invalid JSON is an error", policy: def, gate: GateNoDisruption, evidence: []byte(`{"soak": `), err: "not JSON"},
		{name: "unknown gate", policy: def, gate: "looksFine", evidence: pass, err: `gate "looksFine": not a gate`},
		{name: "no policy", policy: nil, gate: GateNoDisruption, evidence: pass, err: "no policy"},
		{name: "a panic becomes an error", policy: def, gate: GateNoDisruption, evidence: panicky{}, err: "recovered from a panic: collector bug"},
		{
			name:   "policy that does not compile",
			policy: unchecked(t, map[string]string{"p.cue": "package policy\nnoDisruption: {"}),
			gate:   GateNoDisruption, evidence: pass, err: "expected '}'", policyEr: true,
		},
		{
			name:   "gate field that is not a struct",
			policy: unchecked(t, map[string]string{"p.cue": "package policy\nnoDisruption: [1]"}),
			gate:   GateNoDisruption, evidence: pass, err: "noDisruption: is list, not a struct", policyEr: true,
		},
		{
			name:   "gate field missing",
			policy: unchecked(t, map[string]string{"p.cue": "package policy\ndeploySafe: {}"}),
			gate:   GateNoDisruption, evidence: pass, err: "noDisruption: missing", policyEr: true,
		},
		{
			name: "policy that is not concrete",
			policy: unchecked(t, map[string]string{"p.cue": acceptAll + `
_floor: number
noDisruption: clusters: [...{unavailableSeconds: <=_floor}]`}),
			gate: GateNoDisruption, evidence: pass, err: "the policy is not concrete", policyEr: true,
		},
		{
			name:   "settings that are not valid",
			policy: unchecked(t, map[string]string{"p.cue": acceptAll + `settings: onFail: "Retry"`}),
			gate:   GateNoDisruption, evidence: pass, err: "settings.onFail", policyEr: true,
		},
		{
			name:   "evidence missing a field the policy needs fails; it does not make the policy invalid",
			policy: def, gate: GateRollbackSucceeds,
			evidence: RollbackSucceedsEvidence{Evidence: Evidence{Rollout: "a/b", Candidate: Revision{"r2", "sha256:" + strings.Repeat("a", 64)}}},
			reason:   "not a first rollout, but the evidence names no known-good revision",
		},
		{
			name:   "evidence beyond the contract fails",
			policy: unchecked(t, map[string]string{"p.cue": acceptAll}), gate: GateNoDisruption,
			evidence: []byte(strings.Replace(string(pass), `"soak"`, `"soakedFor": "2m", "soak"`, 1)),
			reason:   "noDisruption.soakedFor: field not allowed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Evaluate(tt.policy, tt.gate, tt.evidence)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				var pe *PolicyError
				if got := errors.As(err, &pe); got != tt.policyEr {
					t.Errorf("error is a *PolicyError: %t, want %t (%v)", got, tt.policyEr, err)
				}
				if d.Pass {
					t.Errorf("an error with a passing decision: %+v", d)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if d.Pass != tt.pass {
				t.Fatalf("pass = %t, want %t; reasons: %q", d.Pass, tt.pass, d.Reasons)
			}
			if tt.pass && len(d.Reasons) > 0 {
				t.Errorf("a pass with reasons: %q", d.Reasons)
			}
			if tt.reason != "" && !containsSubstring(d.Reasons, tt.reason) {
				t.Errorf("reasons %q lack %q", d.Reasons, tt.reason)
			}
			if d.PolicyDigest != tt.policy.Digest() || d.Gate != tt.gate {
				t.Errorf("decision names policy %q gate %q, want %q %q", d.PolicyDigest, d.Gate, tt.policy.Digest(), tt.gate)
			}
		})
	}
}

func containsSubstring(list []string, s string) bool {
	for _, x := range list {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

func TestEvaluateOversizedWrapsSentinel(t *testing.T) {
	big := NoDisruptionEvidence{}
	for i := 0; len(big.Clusters)*100 < MaxEvidenceBytes+100; i++ {
		big.Clusters = append(big.Clusters, ClusterContinuity{Name: fmt.Sprintf("member-%05d-with-a-long-name-for-padding-padding-padding", i)})
	}
	_, err := Evaluate(DefaultPolicy(), GateNoDisruption, big)
	if !errors.Is(err, ErrEvidenceTooLarge) {
		t.Fatalf("error %v, want ErrEvidenceTooLarge", err)
	}
}

// TestReasonsNameClustersInOrder: reasons carry the CUE path and the cluster's name, in natural
// order (clusters.2 before clusters.10), each once.
func TestReasonsNameClustersInOrder(t *testing.T) {
	ev := wave(12, 0)
	for _, i := range []int{2, 10, 11} {
		ev.Clusters[i].SetAvailability(true, 0.5, 0)
	}
	d, err := Evaluate(DefaultPolicy(), GateNoDisruption, ev)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"noDisruption.clusters.2.minAvailableRatio: invalid value 0.5 (out of bound >=0.9) (clusters.2: member-0002)",
		"noDisruption.clusters.10.minAvailableRatio: invalid value 0.5 (out of bound >=0.9) (clusters.10: member-0010)",
		"noDisruption.clusters.11.minAvailableRatio: invalid value 0.5 (out of bound >=0.9) (clusters.11: member-0011)",
	}
	if d.Pass || !reflect.DeepEqual(d.Reasons, want) {
		t.Fatalf("reasons:\n%s\nwant:\n%s", strings.Join(d.Reasons, "\n"), strings.Join(want, "\n"))
	}
}

// wave is a healthy n-cluster noDisruption summary.
func wave(n, maxFailures int) NoDisruptionEvidence {
	ev := NoDisruptionEvidence{
		Evidence: Evidence{
			Rollout:     "apps/podinfo",
			Wave:        "everyone",
			Candidate:   Revision{Revision: "main@sha1:2222222222222222222222222222222222222222", Digest: "sha256:" + strings.Repeat("c", 64)},
			KnownGood:   &Revision{Revision: "main@sha1:1111111111111111111111111111111111111111", Digest: "sha256:" + strings.Repeat("6", 64)},
			CollectedAt: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC),
			Limits:      []string{"availability sampled every 5s; a shorter outage may be missed"},
		},
		Soak:            "2m0s",
		SampleInterval:  "5s",
		MaxFailures:     maxFailures,
		ExpectedSamples: 24,
	}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("member-%04d", i)
		ev.Targets = append(ev.Targets, name)
		c := ClusterContinuity{
			Name: name, Ready: true, Revision: ev.Candidate.Revision,
			Samples: 24, ObservedSamples: 24, HealthChecks: HealthChecksPassed,
		}
		c.SetAvailability(true, 1, 0)
		ev.Clusters = append(ev.Clusters, c)
	}
	return ev
}

func TestEvaluateGoEvidence(t *testing.T) {
	d, err := Evaluate(DefaultPolicy(), GateNoDisruption, wave(3, 0))
	if err != nil || !d.Pass {
		t.Fatalf("a healthy wave from Go values: %+v %v", d, err)
	}
	if len(d.Limits) != 1 {
		t.Errorf("limits %q, want the evidence's", d.Limits)
	}
	// nil slices are omitted, and the schema reads them as empty: an empty wave fits the contract,
	// and fails for having no targets alone, since a gate over no cluster never passes.
	ev := wave(0, 0)
	ev.Limits = nil
	d, err = Evaluate(DefaultPolicy(), GateNoDisruption, ev)
	if err != nil || d.Pass || len(d.Reasons) != 1 || !strings.HasPrefix(d.Reasons[0], "noDisruption._noTargets: the wave has no targets") {
		t.Fatalf("an empty wave: %+v %v", d, err)
	}
}

// TestEvaluateConcurrently shares one Policy between goroutines; run with -race to see it hold.
func TestEvaluateConcurrently(t *testing.T) {
	p := DefaultPolicy()
	bad := wave(5, 0)
	bad.Clusters[3].Ready = false
	want, err := Evaluate(p, GateNoDisruption, bad)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				got, err := Evaluate(p, GateNoDisruption, bad)
				if err != nil || !reflect.DeepEqual(got, want) {
					errs <- fmt.Sprintf("%+v %v", got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("a concurrent evaluation differs: %s", e)
	}
}

func TestPolicyDigest(t *testing.T) {
	a, b := []byte("package policy\n"+acceptAll[len("package policy\n"):]), []byte("package policy\n\nsettings: soak: \"2m\"\n")
	load := func(files map[string][]byte) string {
		t.Helper()
		p, err := LoadPolicy(files)
		if err != nil {
			t.Fatal(err)
		}
		return p.Digest()
	}
	base := load(map[string][]byte{"gates.cue": a, "settings.cue": b})
	// Map order is random; a digest over sorted names does not see it.
	for i := 0; i < 20; i++ {
		m := map[string][]byte{}
		if i%2 == 0 {
			m["settings.cue"], m["gates.cue"] = b, a
		} else {
			m["gates.cue"], m["settings.cue"] = a, b
		}
		if got := load(m); got != base {
			t.Fatalf("digest changed with insertion order: %s vs %s", got, base)
		}
	}
	if !strings.HasPrefix(base, "sha256:") || len(base) != len("sha256:")+64 {
		t.Errorf("digest %q is not sha256:<hex>", base)
	}
	for name, files := range map[string]map[string][]byte{
		"renamed file":   {"gates.cue": a, "other.cue": b},
		"changed byte":   {"gates.cue": a, "settings.cue": append(append([]byte(nil), b...), ' ')},
		"bytes moved":    {"gates.cue": append(append([]byte(nil), a...), b[:len("package policy\n")]...), "settings.cue": b[len("package policy\n"):]},
		"one file fewer": {"gates.cue": append(append([]byte(nil), a...), b[len("package policy\n"):]...)},
	} {
		p, err := newPolicy(files, "sha256:")
		if err != nil {
			t.Fatal(err)
		}
		if p.Digest() == base {
			t.Errorf("%s: same digest", name)
		}
	}
	if d := DefaultPolicy().Digest(); !strings.HasPrefix(d, "builtin:sha256:") {
		t.Errorf("default policy digest %q", d)
	}
}

func TestLoadPolicyProblems(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no files", nil, "the policy has no .cue files"},
		{"not a .cue file", map[string]string{"policy.yaml": acceptAll}, "policy.yaml: a policy file is a .cue file"},
		{"a path, not a name", map[string]string{"sub/p.cue": acceptAll}, "sub/p.cue: a policy file is a .cue file"},
		{"no package clause", map[string]string{"p.cue": "deploySafe: {}"}, "needs a package clause"},
		{"two packages", map[string]string{"a.cue": acceptAll, "b.cue": "package other\n"}, `package name "other" conflicts`},
		{"non-standard import", map[string]string{"a.cue": "package policy\nimport \"example.com/x\"\n"}, "may import only CUE's standard library"},
		{"settings not concrete", map[string]string{"a.cue": acceptAll + "settings: soak: \"2m\" | \"5m\"\n"}, "settings.soak: incomplete value"},
		{"settings out of range", map[string]string{"a.cue": acceptAll + "settings: onFail: \"Retry\"\n"}, "settings.onFail"},
		{"unknown setting", map[string]string{"a.cue": acceptAll + "settings: soke: \"1m\"\n"}, "settings.soke: field not allowed"},
		{"negative soak", map[string]string{"a.cue": acceptAll + "settings: soak: \"-1m\"\n"}, "settings.soak"},
		{"zero soak", map[string]string{"a.cue": acceptAll + "settings: soak: \"0s\"\n"}, `settings.soak: "0s": a wave must soak for longer than 0s`},
		{"zero soak in other units", map[string]string{"a.cue": acceptAll + "settings: soak: \"0h0.0m\"\n"}, `settings.soak: "0h0.0m": a wave must soak for longer than 0s`},
		{"soak of ten years", map[string]string{"a.cue": acceptAll + "settings: soak: \"87600h\"\n"}, `settings.soak: "87600h" is outside 0s to 168h0m0s`},
		{"sampleInterval 0s", map[string]string{"a.cue": acceptAll + "settings: sampleInterval: \"0s\"\n"}, `settings.sampleInterval: "0s" is outside 1s to 10m0s`},
		{"sampleInterval of an hour", map[string]string{"a.cue": acceptAll + "settings: sampleInterval: \"1h\"\n"}, `settings.sampleInterval: "1h" is outside 1s to 10m0s`},
		{"inconclusiveAfter 0s", map[string]string{"a.cue": acceptAll + "settings: inconclusiveAfter: \"0s\"\n"}, `settings.inconclusiveAfter: "0s" is outside 30s to 168h0m0s: a gate waits at least 30s`},
		{"typo in a list pattern", map[string]string{"a.cue": acceptAll + "noDisruption: clusters: [...{redy: true}]\n"}, "noDisruption.clusters.[*].redy: field not allowed"},
		{"wrong type in a list pattern", map[string]string{"a.cue": acceptAll + "noDisruption: clusters: [...{ready: \"yes\"}]\n"}, "noDisruption.clusters.[*].ready: conflicting values"},
		{"typo in a comprehension", map[string]string{"a.cue": acceptAll + "noDisruption: {if noDisruption.maxFailures == 0 {maxFailure: 0}}\n"}, "maxFailure: field not allowed"},
		{"unknown top-level field", map[string]string{"a.cue": acceptAll + "limits: []\n"}, "limits: not a gate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string][]byte{}
			for n, s := range tt.files {
				files[n] = []byte(s)
			}
			_, err := LoadPolicy(files)
			var pe *PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v, want a *PolicyError", err)
			}
			if !containsSubstring(pe.Problems, tt.want) {
				t.Fatalf("problems %q lack %q", pe.Problems, tt.want)
			}
		})
	}
}

func TestSettingsDefaults(t *testing.T) {
	p, err := LoadPolicy(map[string][]byte{"p.cue": []byte(acceptAll)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Settings()
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{
		Soak: time.Minute, SampleInterval: 5 * time.Second, OnFail: "Hold", InconclusiveAfter: 10 * time.Minute,
		OnInconclusive: "Fail", CatchUp: CatchUpSettings{MaxConcurrent: 10},
		Approvals: ApprovalSettings{Waves: []string{}, Classes: []string{}},
		Tolerances: Tolerances{MinAvailableRatio: 0.9, MaxUnavailableSeconds: 30, MaxRehearsalSeconds: 600, MinSampleCoverage: 0.8,
			MaxErrorRatio: 0.01, MaxToBaseline: 1.5},
		Metrics: MetricSettings{ClusterLabel: "cluster", BaselineClusters: 5, Queries: map[string]string{}}, Checks: map[string]CheckSettings{},
	}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("settings %+v, want %+v", s, want)
	}
	def, err := DefaultPolicy().Settings()
	if err != nil || !reflect.DeepEqual(def, want) {
		t.Fatalf("the default policy's settings %+v (%v), want the #Settings defaults %+v", def, err, want)
	}
	a := ApprovalSettings{Waves: []string{"production"}, Classes: []string{v1alpha1.ClassSystemConfiguration}}
	if !a.NeedsApproval(v1alpha1.ClassUserWorkload, "production") || !a.NeedsApproval(v1alpha1.ClassSystemConfiguration, "canary") || a.NeedsApproval(v1alpha1.ClassUserWorkload, "canary") {
		t.Error("NeedsApproval does not follow waves and classes")
	}
}

func TestCapReasons(t *testing.T) {
	r := []string{"a", "b", "c", "d"}
	for _, tt := range []struct {
		n    int
		want []string
	}{
		{10, []string{"a", "b", "c", "d"}},
		{4, []string{"a", "b", "c", "d"}},
		{3, []string{"a", "b", "and 2 more"}},
		{1, []string{"and 4 more"}},
		{0, []string{"and 4 more"}},
	} {
		if got := CapReasons(r, tt.n); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("CapReasons(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
	if got := CapReasons(nil, 3); len(got) != 0 {
		t.Errorf("CapReasons(nil) = %q", got)
	}
}

func TestSortUnique(t *testing.T) {
	got := sortUnique([]string{"x.10.a", "x.2.a", "x.2.a", "x.1.b", "x.01.c", "y", "x.10"})
	want := []string{"x.1.b", "x.01.c", "x.2.a", "x.10", "x.10.a", "y"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("sortUnique = %q, want %q", got, want)
	}
}

// TestGateNamesMatchAPI keeps this package's gate names those of the API.
func TestGateNamesMatchAPI(t *testing.T) {
	if !reflect.DeepEqual(Gates, v1alpha1.Gates) {
		t.Fatalf("Gates %v, API %v", Gates, v1alpha1.Gates)
	}
}

// fleetPreflight is a first wave's deploySafe evidence over a fleet of 1 + n + m clusters: the
// canary, a ring of n and the rest of m, every one reachable and accepting the candidate.
func fleetPreflight(n, m int, ringBudget, restBudget int) DeploySafeEvidence {
	ev := DeploySafeEvidence{
		Evidence: Evidence{
			Rollout: "apps/podinfo", Wave: "canary", Targets: []string{"member-0000"},
			Candidate:   Revision{Revision: "main@sha1:2222222222222222222222222222222222222222", Digest: "sha256:" + strings.Repeat("c", 64)},
			CollectedAt: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC),
		},
		Render: RenderEvidence{OK: true},
	}
	ok := func(i int) ClusterPreflight {
		return ClusterPreflight{Name: fmt.Sprintf("member-%04d", i), Reachable: true, ServerVersion: "v1.37.2"}
	}
	ev.Preflight.Clusters = []ClusterPreflight{ok(0)}
	var ring, rest []ClusterPreflight
	for i := 1; i <= n; i++ {
		ring = append(ring, ok(i))
	}
	for i := n + 1; i <= n+m; i++ {
		rest = append(rest, ok(i))
	}
	ev.Preflight.LaterWaves = []WavePreflight{NewWavePreflight("ring", ringBudget, ring), NewWavePreflight("rest", restBudget, rest)}
	return ev
}

// refill recomputes the later waves' failed lists after a test broke some of their clusters.
func (ev *DeploySafeEvidence) refill() {
	for i, w := range ev.Preflight.LaterWaves {
		ev.Preflight.LaterWaves[i] = NewWavePreflight(w.Name, w.MaxFailures, w.Clusters)
	}
}

// The first wave's deploySafe judges every later wave's preflight against that wave's own budget:
// a CRD missing on the last ring fails it with no budget, passes within one, and fails beyond it.
func TestFleetPreflightBudget(t *testing.T) {
	const crd = "monitoring.coreos.com/v1, Kind=ServiceMonitor: ServiceMonitor web/web"
	if d, err := Evaluate(DefaultPolicy(), GateDeploySafe, fleetPreflight(99, 900, 0, 0)); err != nil || !d.Pass {
		t.Fatalf("a healthy fleet of 1,000: %+v %v", d, err)
	}
	ev := fleetPreflight(99, 900, 0, 0)
	ev.Preflight.LaterWaves[1].Clusters[899].MissingAPIs = []string{crd}
	ev.refill()
	d, err := Evaluate(DefaultPolicy(), GateDeploySafe, ev)
	want := `deploySafe.preflight.laterWaves.1.clusters.899.missingAPIs.0: the cluster does not serve this API, which the candidate uses (laterWaves.1: rest; clusters.899: member-0999; missingAPIs.0: "` + strings.ReplaceAll(crd, `"`, `\"`) + `")`
	if err != nil || d.Pass || len(d.Reasons) != 1 || d.Reasons[0] != want {
		t.Fatalf("the last ring misses a CRD and allows no failure: %+v %v\nwant %s", d, err, want)
	}

	ev = fleetPreflight(99, 900, 0, 1)
	ev.Preflight.LaterWaves[1].Clusters[899].MissingAPIs = []string{crd}
	ev.refill()
	if d, err := Evaluate(DefaultPolicy(), GateDeploySafe, ev); err != nil || !d.Pass {
		t.Fatalf("one failure within the last ring's budget of one: %+v %v", d, err)
	}
	if got := ev.Preflight.LaterWaves[1].Failed; len(got) != 1 || got[0] != "member-0999" {
		t.Fatalf("failed = %v", got)
	}

	ev.Preflight.LaterWaves[1].Clusters[10].Reachable = false
	ev.refill()
	d, err = Evaluate(DefaultPolicy(), GateDeploySafe, ev)
	want = "deploySafe.preflight.laterWaves.1._budget: 2 targets failed their preflight, more than the wave's maxFailures of 1: member-0110, member-0999 (laterWaves.1: rest)"
	if err != nil || d.Pass || len(d.Reasons) != 1 || d.Reasons[0] != want {
		t.Fatalf("two failures over a budget of one: %+v %v\nwant %s", d, err, want)
	}

	// The ring's budget is its own: a failure there with none allowed fails the gate.
	ev = fleetPreflight(99, 900, 0, 5)
	ev.Preflight.LaterWaves[0].Clusters[3].DryRunErrors = []string{"Deployment web/web: admission webhook denied"}
	ev.refill()
	if d, err := Evaluate(DefaultPolicy(), GateDeploySafe, ev); err != nil || d.Pass {
		t.Fatalf("a ring without budget: %+v %v", d, err)
	}

	// failed is derived from the clusters: evidence that says otherwise does not fit the schema.
	ev = fleetPreflight(2, 2, 0, 1)
	ev.Preflight.LaterWaves[1].Failed = []string{"member-0003"}
	if d, err := Evaluate(DefaultPolicy(), GateDeploySafe, ev); err != nil || d.Pass {
		t.Fatalf("a failed list the clusters do not support: %+v %v", d, err)
	}
}

// TestInconclusiveOnlyWhenWhatWasObservedIsFine: a wave that fails only on a member it could not
// observe is Inconclusive; observed disruption beside it is a Fail; a failure budget that covers
// the member passes the wave, the member counted against it.
func TestInconclusiveOnlyWhenWhatWasObservedIsFine(t *testing.T) {
	unobserved := func(maxFailures int) NoDisruptionEvidence {
		ev := wave(4, maxFailures)
		ev.Clusters[3].ObservedSamples, ev.Clusters[3].FailedSamples = 0, 24
		ev.Unobserved = []Unobserved{{Name: ev.Clusters[3].Name, Reason: "its last sample could not read any workload"}}
		return ev
	}
	d, err := Evaluate(DefaultPolicy(), GateNoDisruption, unobserved(0))
	if err != nil || d.Pass || !d.Inconclusive || !reflect.DeepEqual(d.Unobserved, []string{"member-0003"}) {
		t.Fatalf("a wave failing only on an unobserved member: %+v %v, want Inconclusive naming member-0003", d, err)
	}
	ev := unobserved(0)
	ev.Clusters[1].SetAvailability(true, 0.5, 0)
	if d, err := Evaluate(DefaultPolicy(), GateNoDisruption, ev); err != nil || d.Pass || d.Inconclusive {
		t.Fatalf("observed disruption beside an unobserved member: %+v %v, want Fail", d, err)
	}
	if d, err := Evaluate(DefaultPolicy(), GateNoDisruption, unobserved(1)); err != nil || !d.Pass {
		t.Fatalf("an unobserved member within the failure budget: %+v %v, want Pass", d, err)
	}
	ev = unobserved(1)
	ev.Clusters[1].SetAvailability(true, 0.5, 0)
	if d, err := Evaluate(DefaultPolicy(), GateNoDisruption, ev); err != nil || d.Pass || !d.Inconclusive {
		t.Fatalf("one disrupted and one unobserved member over a budget of one: %+v %v, want Inconclusive (the unobserved one may be fine)", d, err)
	}
}

// A wave of one target that could not be observed is Inconclusive, not failed by the rule that a
// gate over no cluster never passes: what could not be observed is assumed, not removed.
func TestInconclusiveOnAOneTargetWave(t *testing.T) {
	data, err := os.ReadFile("../testdata/evidence/deploySafe/inconclusive-unreachable.json")
	if err != nil {
		t.Fatal(err)
	}
	var ev DeploySafeEvidence
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatal(err)
	}
	unreachable := ev.Preflight.Clusters[2]
	ev.Targets = []string{unreachable.Name}
	ev.Preflight = PreflightEvidence{WavePreflight: NewWavePreflight("", 0, []ClusterPreflight{unreachable})}
	d, err := Evaluate(DefaultPolicy(), GateDeploySafe, ev)
	if err != nil || d.Pass || !d.Inconclusive {
		t.Fatalf("a one-target wave whose target could not be reached: %+v %v, want Inconclusive", d, err)
	}
}

// unmeasured marks the listed members of ev as never read by a sample: no sample observed them, so
// their availability was not measured, and the evidence says they could not be observed.
func unmeasured(ev NoDisruptionEvidence, members ...int) NoDisruptionEvidence {
	for _, i := range members {
		c := &ev.Clusters[i]
		c.ObservedSamples, c.FailedSamples = 0, c.Samples
		c.SetAvailability(false, 0, 0)
		ev.Unobserved = append(ev.Unobserved, Unobserved{Name: c.Name, Reason: "its last sample could not read any workload"})
	}
	return ev
}

// A measure that was not taken is absent from the evidence and named in unset, never a number; the
// default policy passes no cluster on it, under either form of the budget, and the gate is
// Inconclusive (the member's coverage failed too), not a CUE error and not a Pass.
func TestUnmeasuredAvailabilityIsAbsentAndInconclusive(t *testing.T) {
	ev := unmeasured(wave(4, 0), 3)
	data, err := json.Marshal(ev.Clusters[3])
	if err != nil {
		t.Fatal(err)
	}
	if s := string(data); strings.Contains(s, `"minAvailableRatio":`) || strings.Contains(s, `"unavailableSeconds":`) ||
		!strings.Contains(s, `"unset":["minAvailableRatio","unavailableSeconds"]`) {
		t.Errorf("a member not measured: %s", s)
	}
	if data, _ := json.Marshal(ev.Clusters[0]); !strings.Contains(string(data), `"unavailableSeconds":0`) || strings.Contains(string(data), `"unset"`) {
		t.Errorf("a measured 0 is a measurement, and is there: %s", data)
	}

	d, err := Evaluate(DefaultPolicy(), GateNoDisruption, ev)
	if err != nil || d.Pass || !d.Inconclusive || !reflect.DeepEqual(d.Unobserved, []string{"member-0003"}) {
		t.Fatalf("a member not measured, no budget: %+v %v, want Inconclusive naming member-0003", d, err)
	}
	want := `noDisruption.clusters.3.unset.0: not measured, and a measure that was not taken passes nothing (the gate's unobserved says why) (clusters.3: member-0003; unset.0: "minAvailableRatio")`
	if !slices.Contains(d.Reasons, want) {
		t.Errorf("reasons %q should say what was not measured: %q", d.Reasons, want)
	}

	// With a budget the policy counts unwell members in a comprehension, where an absent measure
	// cannot be compared: two members not measured are two failures over a budget of one.
	d, err = Evaluate(DefaultPolicy(), GateNoDisruption, unmeasured(wave(4, 1), 2, 3))
	if err != nil || d.Pass || !d.Inconclusive || !slices.Contains(d.Reasons, "noDisruption._budget: 2 clusters failed, more than the wave's maxFailures of 1: member-0002, member-0003") {
		t.Fatalf("two members not measured over a budget of one: %+v %v, want Inconclusive", d, err)
	}
	if d, err := Evaluate(DefaultPolicy(), GateNoDisruption, unmeasured(wave(4, 1), 3)); err != nil || !d.Pass {
		t.Fatalf("a member not measured within the budget: %+v %v, want Pass", d, err)
	}

	// Evidence that leaves a measure out without naming it in unset passes nothing either.
	ev = wave(4, 0)
	ev.Clusters[3].MinAvailableRatio = nil
	if d, err := Evaluate(DefaultPolicy(), GateNoDisruption, ev); err != nil || d.Pass {
		t.Fatalf("a measure left out, no budget: %+v %v, want a failed gate", d, err)
	}
	ev = wave(4, 1)
	ev.Clusters[2].UnavailableSeconds, ev.Clusters[3].MinAvailableRatio = nil, nil
	if d, err := Evaluate(DefaultPolicy(), GateNoDisruption, ev); err != nil || d.Pass ||
		!slices.Contains(d.Reasons, "noDisruption._budget: 2 clusters failed, more than the wave's maxFailures of 1: member-0002, member-0003") {
		t.Fatalf("two measures left out over a budget of one: %+v %v, want a failed gate counting both", d, err)
	}
}

// The default policy finds a member at the candidate by the artifact its revision names, the part
// after the last "@": a source pinned by digest reports "sha256:<d>" where the tracked OCI
// repository said "latest@sha256:<d>" (and a Git source pinned by commit "sha1:<c>"). A member at
// another artifact fails, with a reason naming both revisions.
func TestRevisionComparedByArtifact(t *testing.T) {
	digest, other := "sha256:"+strings.Repeat("d", 64), "sha256:"+strings.Repeat("e", 64)
	for _, maxFailures := range []int{0, 1} {
		oci := func(revisions ...string) NoDisruptionEvidence {
			ev := wave(len(revisions), maxFailures)
			ev.Candidate.Revision = "latest@" + digest
			for i, r := range revisions {
				ev.Clusters[i].Revision = r
			}
			return ev
		}
		for _, revisions := range [][]string{{digest, digest, digest}, {"latest@" + digest, "v2@" + digest, digest}} {
			if d, err := Evaluate(DefaultPolicy(), GateNoDisruption, oci(revisions...)); err != nil || !d.Pass {
				t.Errorf("maxFailures %d: members at the candidate's digest %q: %+v %v, want Pass", maxFailures, revisions, d, err)
			}
		}
		git := wave(2, maxFailures)
		git.Clusters[1].Revision = "sha1:2222222222222222222222222222222222222222"
		if d, err := Evaluate(DefaultPolicy(), GateNoDisruption, git); err != nil || !d.Pass {
			t.Errorf("maxFailures %d: a Git member pinned by commit: %+v %v, want Pass", maxFailures, d, err)
		}
		// Not the candidate: another digest, another digest under the candidate's tag, a revision
		// that only ends like the candidate's id.
		for _, wrong := range []string{other, "latest@" + other, "x" + digest} {
			ev := oci(digest, wrong, wrong)
			d, err := Evaluate(DefaultPolicy(), GateNoDisruption, ev)
			if err != nil || d.Pass || d.Inconclusive {
				t.Fatalf("maxFailures %d: members at %s: %+v %v, want Fail", maxFailures, wrong, d, err)
			}
			want := "noDisruption._budget: 2 clusters failed, more than the wave's maxFailures of 1: member-0001, member-0002"
			if maxFailures == 0 {
				want = fmt.Sprintf("noDisruption.clusters.1.revision: the cluster runs %s, not the candidate latest@%s (clusters.1: member-0001)", wrong, digest)
			}
			if !slices.Contains(d.Reasons, want) {
				t.Errorf("maxFailures %d: reasons %q, want %q", maxFailures, d.Reasons, want)
			}
		}
	}
}
