package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// The columns -o wide adds to get's tables, as kubectl's -o wide does: what a person otherwise
// looks up in -o yaml.
var (
	rolloutWide = []string{"CANDIDATE-DIGEST", "KNOWN-GOOD-DIGEST", "POLICY", "SUSPENDED", "LAST TRANSITION"}
	clusterWide = []string{"SUSPENDED", "LABELS"}
	receiptWide = []string{"KNOWN-GOOD", "TARGETS", "POLICY-DIGEST", "EVIDENCE-DIGEST"}
)

// rolloutWideCells: the digests of the candidate's and known-good's artifacts, the policy that
// decides the gates (spec.policy's source, or the built-in default), and how long ago Ready last
// changed.
func rolloutWideCells(now time.Time, r rolloutRow) []string {
	policy := "builtin"
	if p := r.rollout.Spec.Policy; p != nil {
		policy = strings.ToLower(p.SourceRef.Kind) + "/" + p.SourceRef.Name
		if p.Path != "" {
			policy += ":" + p.Path
		}
	}
	transition := "-"
	if c := condition(r.rollout.Status.Conditions, v1alpha1.ReadyCondition); c != nil {
		transition = age(now, &c.LastTransitionTime)
	}
	return []string{shortDigest(digestOf(r.Candidate)), shortDigest(digestOf(r.KnownGood)), policy, fmt.Sprint(r.Suspended), transition}
}

// clusterWideCells: whether the cluster is suspended, and its labels, which wave selectors match.
func clusterWideCells(r clusterRow) []string {
	var labels []string
	for _, k := range slices.Sorted(maps.Keys(r.labels)) {
		labels = append(labels, k+"="+r.labels[k])
	}
	return []string{fmt.Sprint(r.Suspended), strings.Join(labels, ",")}
}

// receiptWideCells: the known-good the decision was made against, how many targets it covered,
// and the digests of the policy and the evidence it was made with.
func receiptWideCells(r receiptRow) []string {
	return []string{shortRevision(r.KnownGood), fmt.Sprint(len(r.Targets)), shortDigest(r.PolicyDigest), shortDigest(r.evidenceDigest)}
}

func digestOf(r *v1alpha1.RevisionStatus) string {
	if r == nil {
		return ""
	}
	return r.Digest
}

// shortDigest keeps a digest's algorithm and the first 12 characters of its value
// ("sha256:9f86d081884c", "builtin:sha256:5b1f0e8c22a7"), "-" for none.
func shortDigest(d string) string {
	if d == "" {
		return "-"
	}
	i := strings.LastIndex(d, ":")
	if len(d)-i-1 <= 12 {
		return d
	}
	return d[:i+1+12]
}
