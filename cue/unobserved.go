package cue

import (
	"fmt"
	"slices"
	"strings"
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

// withoutTargets is the evidence document as if the named targets were not in it: gone from
// targets, from every list of per-cluster entries (objects with a name) and from the lists of
// names of failed targets, and the unobserved list dropped. Install-time value findings stay:
// they are read on the hub, not observed on a member.
func withoutTargets(doc map[string]any, names map[string]bool) map[string]any {
	out := make(map[string]any, len(doc))
	for k, v := range doc {
		switch k {
		case "unobserved":
			continue
		case "install":
			out[k] = v
			continue
		}
		out[k] = dropNames(k, v, names)
	}
	return out
}

// dropNames removes the named targets from v, found under key.
func dropNames(key string, v any, names map[string]bool) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = dropNames(k, e, names)
		}
		return out
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			switch el := e.(type) {
			case map[string]any:
				if n, ok := el["name"].(string); ok && names[n] {
					continue
				}
			case string:
				if (key == "targets" || key == "failed") && names[el] {
					continue
				}
			}
			out = append(out, dropNames("", e, names))
		}
		return out
	}
	return v
}

// FirstUnobserved names the first few of an inconclusive decision's unobserved targets for a
// message.
func FirstUnobserved(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:n], ", ") + fmt.Sprintf(" and %d more", len(names)-n)
}
