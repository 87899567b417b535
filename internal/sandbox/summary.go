package sandbox

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// gateOrder is the order gates are decided in for a wave: the registry's.
var gateOrder = v1alpha1.Gates

// summaryTable is one row per gate decision of each release: its wave, gate, result and receipt.
// Within a release, rows go by wave (in the rollout's order), then by when they were decided, then
// by gate; the release's name, commit and outcome are on its first row.
func summaryTable(receipts []v1alpha1.GateReceipt, waves []string, releases []release) string {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tCOMMIT\tOUTCOME\tWAVE\tGATE\tRESULT\tRECEIPT\tBY")
	waveIndex := func(w string) int {
		if i := slices.Index(waves, w); i >= 0 {
			return i
		}
		return len(waves)
	}
	for _, rel := range releases {
		var rows []v1alpha1.GateReceipt
		for _, rc := range receipts {
			if rc.Spec.Candidate.Revision == rel.Revision {
				rows = append(rows, rc)
			}
		}
		sort.SliceStable(rows, func(i, j int) bool {
			a, b := rows[i].Spec, rows[j].Spec
			if wa, wb := waveIndex(a.Wave), waveIndex(b.Wave); wa != wb {
				return wa < wb
			}
			if !a.EvaluatedAt.Equal(&b.EvaluatedAt) {
				return a.EvaluatedAt.Before(&b.EvaluatedAt)
			}
			return slices.Index(gateOrder, a.Gate) < slices.Index(gateOrder, b.Gate)
		})
		first := []string{rel.Label, commitOf(rel.Revision), rel.Outcome}
		if len(rows) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\n", strings.Join(first, "\t"))
			continue
		}
		for i, rc := range rows {
			lead := []string{"", "", ""}
			if i == 0 {
				lead = first
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", strings.Join(lead, "\t"), rc.Spec.Wave, rc.Spec.Gate, rc.Spec.Result, rc.Name, approvers(rc))
		}
	}
	tw.Flush()
	return buf.String()
}

// approvers names who approved what a receipt relied on, "-" for none.
func approvers(rc v1alpha1.GateReceipt) string {
	var by []string
	for _, a := range rc.Spec.Approvals {
		if a.By != "" && !slices.Contains(by, a.By) {
			by = append(by, a.By)
		}
	}
	if len(by) == 0 {
		return "-"
	}
	return "approved by " + strings.Join(by, ", ")
}

// commitOf is the first 12 characters of a revision's commit.
func commitOf(rev string) string {
	if i := strings.LastIndex(rev, ":"); i >= 0 {
		rev = rev[i+1:]
	}
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}
