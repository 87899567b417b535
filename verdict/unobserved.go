package verdict

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Unobserved is #Unobserved: a target whose evidence could not be collected in full, or, without a
// name, evidence about no one target (a fetch that failed).
type Unobserved struct {
	Name   string `json:"name,omitempty"`
	Reason string `json:"reason"`
}

// WholeGate is what Decision.Unobserved lists for evidence about no one target.
const WholeGate = "*"

// unobservedIn reads #Evidence.unobserved from an evidence document: the names (WholeGate for an
// entry without one), sorted and de-duplicated, the set of named targets, and whether some entry
// has no name.
func unobservedIn(doc map[string]any) (list []string, names map[string]bool, whole bool) {
	entries, _ := doc["unobserved"].([]any)
	names = map[string]bool{}
	for _, e := range entries {
		m, _ := e.(map[string]any)
		name, _ := m["name"].(string)
		if name == "" {
			whole = true
			name = WholeGate
		} else {
			names[name] = true
		}
		list = append(list, name)
	}
	slices.Sort(list)
	return slices.Compact(list), names, whole
}

// unobservedReasons says, for an inconclusive decision, what could not be observed.
func unobservedReasons(gate string, doc map[string]any) []string {
	entries, _ := doc["unobserved"].([]any)
	out := make([]string, 0, len(entries))
	for _, e := range entries {
		m, _ := e.(map[string]any)
		name, _ := m["name"].(string)
		reason, _ := m["reason"].(string)
		if name == "" {
			out = append(out, fmt.Sprintf("%s: inconclusive: %s", gate, reason))
			continue
		}
		out = append(out, fmt.Sprintf("%s: inconclusive: target %s could not be observed: %s", gate, name, reason))
	}
	return out
}

// assumeObserved is the evidence document as if the named targets had shown, where they could not
// be observed, what a healthy member shows: a preflight entry reachable (its API and dry-run findings
// kept), a continuity entry Ready at the candidate with its health checks passed and sampled over
// the whole soak (the availability it was seen at kept; a measure that was not taken, fully
// available), and gone from the lists of failed targets; the unobserved list is dropped. What was
// observed of them stays, so a disruption seen before a member went dark still fails the gate.
// Targets and budgets stay as they are.
func assumeObserved(doc map[string]any, names map[string]bool) map[string]any {
	candidate := ""
	if c, ok := doc["candidate"].(map[string]any); ok {
		candidate, _ = c["revision"].(string)
	}
	expected := doc["expectedSamples"]
	out := make(map[string]any, len(doc))
	for k, v := range doc {
		switch k {
		case "unobserved":
			continue
		case "install":
			out[k] = v
			continue
		}
		out[k] = healthy(k, v, names, candidate, expected)
	}
	return out
}

// healthy rewrites the named targets' entries found in v, under key, as assumeObserved says.
func healthy(key string, v any, names map[string]bool, candidate string, expected any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = healthy(k, e, names, candidate, expected)
		}
		if n, ok := x["name"].(string); ok && names[n] {
			assumeHealthy(out, candidate, expected)
		}
		return out
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			if el, ok := e.(string); ok && key == "failed" && names[el] {
				continue
			}
			out = append(out, healthy("", e, names, candidate, expected))
		}
		return out
	}
	return v
}

// assumeHealthy sets, in one target's entry, what could not be observed to what a healthy member
// shows.
func assumeHealthy(e map[string]any, candidate string, expected any) {
	if _, ok := e["reachable"]; ok {
		e["reachable"] = true
		delete(e, "unreachable")
	}
	if _, ok := e["observedSamples"]; ok && expected != nil {
		e["observedSamples"] = expected
		e["samples"] = expected
		e["failedSamples"] = 0
	}
	if _, ok := e["ready"]; ok {
		e["ready"] = true
	}
	// A measure that was not taken (absent, named in unset) is what a healthy member shows; one
	// that was taken is an observation and stays.
	if _, ok := e["observedSamples"]; ok {
		if _, ok := e[MeasureMinAvailableRatio]; !ok {
			e[MeasureMinAvailableRatio] = json.Number("1")
		}
		if _, ok := e[MeasureUnavailableSeconds]; !ok {
			e[MeasureUnavailableSeconds] = json.Number("0")
		}
		delete(e, "unset")
	}
	if h, ok := e["healthChecks"].(string); ok && h != HealthChecksPassed && h != HealthChecksNone {
		e["healthChecks"] = HealthChecksPassed
	}
	if _, ok := e["revision"]; ok && candidate != "" {
		e["revision"] = candidate
	}
	delete(e, "transient")
}
