package availability

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// maxNamed is how many clusters one limit names before it says "and N more", so a wave of 1,000
// clusters has a handful of limit lines, each of bounded length.
const maxNamed = 5

// Limits says what summaries do not establish, for one cluster or for a whole wave (one line per kind
// of limit, naming the clusters it applies to): the outages too short to fall between two samples, the
// gaps longer than three sample intervals, the start or end of the window that nobody sampled, the
// clusters with no samples at all, the reads that failed (each counted one interval as unavailable), the clusters
// with no workload to sample, the kinds judged by health check expressions rather than by replicas,
// and summaries that took in folded samples from outside their window.
// The lines are meant to be copied into the evidence's limits as they are.
func Limits(summaries ...ClusterSummary) []string {
	var (
		out                                                             []string
		interval, maxGap                                                time.Duration
		maxGapOn                                                        string
		sampled                                                         bool
		none, noWorkloads, folded, longGaps, lateStart, earlyEnd, reads []string
		judgedOn                                                        []string
		judged                                                          = map[string]bool{}
	)
	for _, s := range summaries {
		interval = max(interval, s.Interval)
	}
	long := longGapFactor * interval
	for _, s := range summaries {
		if s.Samples == 0 {
			none = append(none, s.Cluster)
			continue
		}
		sampled = true
		if s.MaxGap > maxGap {
			maxGap, maxGapOn = s.MaxGap, s.Cluster
		}
		if s.LongGaps > 0 {
			longGaps = append(longGaps, fmt.Sprintf("%s (%s, the largest %s)", s.Cluster, plural(s.LongGaps, "gap"), dur(s.MaxGap)))
		}
		if !s.Since.IsZero() && s.FirstSample.Sub(s.Since) > long {
			lateStart = append(lateStart, fmt.Sprintf("%s (%s)", s.Cluster, dur(s.FirstSample.Sub(s.Since))))
		}
		if !s.Until.IsZero() && s.Until.Sub(s.LastSample) > long {
			earlyEnd = append(earlyEnd, fmt.Sprintf("%s (%s)", s.Cluster, dur(s.Until.Sub(s.LastSample))))
		}
		if s.ReadErrors > 0 {
			reads = append(reads, fmt.Sprintf("%s (%s in %s)", s.Cluster, plural(s.ReadErrors, "read"), plural(s.FailedSamples, "sample")))
		}
		if s.Workloads == 0 {
			noWorkloads = append(noWorkloads, s.Cluster)
		}
		if s.Folded {
			folded = append(folded, s.Cluster)
		}
		if len(s.JudgedKinds) > 0 {
			judgedOn = append(judgedOn, s.Cluster)
			for _, k := range s.JudgedKinds {
				judged[k] = true
			}
		}
	}
	one := len(summaries) == 1

	if sampled {
		line := fmt.Sprintf("workload availability sampled every %s; an outage shorter than the sample interval may be missed", dur(interval))
		if maxGap > interval {
			on := ""
			if !one {
				on = " on " + maxGapOn
			}
			line = fmt.Sprintf("workload availability sampled every %s; an outage shorter than the largest gap between samples (%s%s) may be missed",
				dur(interval), dur(maxGap), on)
		}
		out = append(out, line)
	}
	if len(none) > 0 {
		out = append(out, fmt.Sprintf("no availability samples %s: nothing is known of the workloads there (minAvailableRatio and unavailableSeconds not measured)", on(none)))
	}
	if len(longGaps) > 0 {
		out = append(out, fmt.Sprintf("gaps of more than %s (%d sample intervals) between samples %s: availability during them is unknown",
			dur(long), longGapFactor, on(longGaps)))
	}
	if len(lateStart) > 0 {
		out = append(out, fmt.Sprintf("sampling began late %s: the start of the window was not observed", on(lateStart)))
	}
	if len(earlyEnd) > 0 {
		out = append(out, fmt.Sprintf("sampling stopped early %s: the end of the window was not observed", on(earlyEnd)))
	}
	if len(reads) > 0 {
		out = append(out, fmt.Sprintf("workload reads failed (timeouts, errors) %s: such a sample did not observe every workload, and counts neither as available nor as unavailable time",
			on(reads)))
	}
	if len(noWorkloads) > 0 {
		out = append(out, fmt.Sprintf("no Deployment, StatefulSet or DaemonSet to sample %s: there is no workload availability to lose (minAvailableRatio 1)",
			on(noWorkloads)))
	}
	if len(judgedOn) > 0 {
		kinds := slices.Sorted(maps.Keys(judged))
		out = append(out, fmt.Sprintf("objects of %s judged by the Kustomization's healthCheckExprs %s: each is available (ratio 1) when its expressions say Current and unavailable (ratio 0) when they say InProgress or Failed, not a count of replicas; one whose expressions cannot be evaluated is a failed read",
			names(kinds), on(judgedOn)))
	}
	if len(folded) > 0 {
		out = append(out, fmt.Sprintf("samples were folded together to bound memory %s: the summary also counts samples from outside the window",
			on(folded)))
	}
	return out
}

// on is "on a, b, c" with at most maxNamed items, then "and N more".
func on(items []string) string { return "on " + names(items) }

// names is "a, b, c" with at most maxNamed items, then "and N more".
func names(items []string) string {
	if len(items) > maxNamed {
		return fmt.Sprintf("%s and %d more", strings.Join(items[:maxNamed], ", "), len(items)-maxNamed)
	}
	return strings.Join(items, ", ")
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// dur prints d to a precision a person reads: 7s, 7.2s, 350ms.
func dur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}
