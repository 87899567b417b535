package fleets

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// hashVersion starts the hashed text so that a change of what is hashed is a deliberate, visible change.
const hashVersion = "fleets.tidegate.dev/plan-v1"

// Hash digests exactly the spec fields Plan reads: clusterSelector, class (empty counts as
// UserWorkload, its default), owner (only for SystemConfiguration, the only class that reads it), and
// each wave's name, selector, count and percent, in order. Fields the plan does not depend on (soak,
// maxFailures, approvals...) are left out so editing them is not mistaken for a re-plan.
//
// Selectors are hashed in a canonical form (nil and {} alike; requirements and values sorted), so
// reordering a selector is not an edit. Hash never fails: an invalid selector is hashed as written and
// Plan reports it. The result is 16 hex characters: it is only compared for equality and is shown in
// status, where a full digest would be noise.
func Hash(spec *v1alpha1.FleetRolloutSpec) string {
	var b strings.Builder
	b.WriteString(hashVersion + "\n")
	class := spec.Class
	if class == "" {
		class = v1alpha1.ClassUserWorkload
	}
	fmt.Fprintf(&b, "class %q\n", class)
	if class == v1alpha1.ClassSystemConfiguration {
		fmt.Fprintf(&b, "owner %q\n", spec.Owner)
	}
	fmt.Fprintf(&b, "clusterSelector %s\n", canonicalSelector(spec.ClusterSelector))
	for _, w := range spec.Waves {
		fmt.Fprintf(&b, "wave %q selector %s count %s percent %s\n",
			w.Name, canonicalSelector(w.Selector), optInt(w.Count), optInt(w.Percent))
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:8])
}

// canonicalSelector writes a selector so that equal selectors written differently give the same text.
func canonicalSelector(s *metav1.LabelSelector) string {
	if s == nil {
		return "{}"
	}
	parts := make([]string, 0, len(s.MatchLabels)+len(s.MatchExpressions))
	for k, v := range s.MatchLabels {
		parts = append(parts, fmt.Sprintf("%q=%q", k, v))
	}
	for _, e := range s.MatchExpressions {
		vals := append([]string(nil), e.Values...)
		sort.Strings(vals)
		vals = slices.Compact(vals)
		parts = append(parts, fmt.Sprintf("%q %s %q", e.Key, e.Operator, vals))
	}
	sort.Strings(parts)
	parts = slices.Compact(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

func optInt(p *int32) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}
