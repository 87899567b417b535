package sandbox

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/attest"
	"github.com/tidegate/tidegate/internal/ops"
	"github.com/tidegate/tidegate/internal/simulator"
)

// release is one revision of the package the demo rolled out, and what became of it.
type release struct {
	Label    string
	Revision string
	Outcome  string
}

// demoResult is what the story did: its releases, in order, and the summary table it printed.
type demoResult struct {
	Releases []release
	Summary  string
	// Record is, for each release, its ledger and whether it verifies with the sandbox's key.
	Record string
}

// demoFieldManager writes the demo's approval, as `tidegate approve` would with its own.
const demoFieldManager = "tidegate-sandbox-demo"

// The v3 fault: the pods of image :v3 lose readiness this long after they became ready. Long
// enough for kustomize-controller to see the canary healthy, short enough to happen and be sampled
// well within the 15s soak, which starts once the Kustomization is Ready (with a 10s soak, a loaded
// machine once decided the canary's soak before a sample saw the loss).
const v3After = 8 * time.Second

// The v4 fault: the share of its requests the pods of image :v4 answer with 500, while they stay
// ready. Thirty times the policy's maxErrorRatio (1 %), so that the canary's mean over the soak is
// well above it even with the first points' rates mixing in v2's answers.
const v4ErrorRatio = 0.3

// noChartV5 says why a chart plays no v5: its change cannot be released as a chart version.
const noChartV5 = `
v5 has no chart equivalent, and the demo stops here. v5 grows db's volume (volumeClaimTemplates
1Gi → 2Gi), which the API server refuses to change in a StatefulSet (the field is immutable): the
Kustomize package's rollout sets force: true, so kustomize-controller recreates the StatefulSet, and
a chart rollout has no such field (spec.template.force is refused beside spec.chart), so
helm-controller's upgrade would fail on every member. A chart that changes a claim template needs
a new StatefulSet (another name) or the old one deleted by hand.
`

// story plays the demo against the running sandbox: v2 passes every gate, v3 loses availability
// and is rolled back, v4 answers errors while staying available and is rolled back on its error
// ratio, v5 needs an approval of its irreversible change (not with a chart: noChartV5). v1 is the
// known-good. With until set, it stops after that release.
func (d *driver) story(ctx context.Context, until string) (*demoResult, error) {
	res := &demoResult{Releases: []release{{Label: "v1", Revision: d.st.Initial[repoPodinfo], Outcome: "Completed (first rollout)"}}}
	if d.chart() {
		fmt.Fprintf(d.out, "\nThe demo: releases of the podinfo chart, each a commit to the podinfo repository that the sandbox\n"+
			"pushes to its registry as the chart's next version, signed.\n")
	} else {
		fmt.Fprintf(d.out, "\nThe demo: four releases of podinfo, each a commit to the podinfo repository.\n")
	}
	plays := []struct {
		label string
		play  func(context.Context) (release, error)
	}{{"v2", d.healthyRelease}, {"v3", d.unavailableRelease}, {"v4", d.erroringRelease}, {"v5", d.irreversibleRelease}}
	for _, p := range plays {
		if p.label == "v5" && d.chart() {
			fmt.Fprint(d.out, noChartV5)
			break
		}
		rel, err := p.play(ctx)
		if err != nil {
			return res, err
		}
		res.Releases = append(res.Releases, rel)
		if p.label == until {
			break
		}
	}

	summary, err := d.summary(ctx, res.Releases)
	if err != nil {
		return res, d.fail("the summary", err)
	}
	res.Summary = summary
	fmt.Fprintf(d.out, "\nEvery gate decision of the demo, with its receipt (kubectl get gatereceipts NAME -o yaml):\n\n%s", summary)
	record, err := d.record(ctx, res.Releases)
	if err != nil {
		return res, d.fail("the signed record", err)
	}
	res.Record = record
	fmt.Fprintf(d.out, "\n%s", record)
	return res, nil
}

// healthyRelease is v2: it goes wave by wave, and every gate passes.
func (d *driver) healthyRelease(ctx context.Context) (release, error) {
	fmt.Fprintf(d.out, "\nv2: a healthy release. It goes wave by wave, and every gate passes.\n")
	start := d.watch.reset()
	rev, err := d.commitRelease(ctx, "v2", nil)
	if err != nil {
		return release{}, d.fail("v2: committing the release", err)
	}
	if _, err := d.waitRollout(ctx, completes(rev, "v2")); err != nil {
		return release{}, d.fail("v2: a healthy release should complete", err)
	}
	fmt.Fprintf(d.out, "  v2 runs everywhere (%s)\n", roundDuration(time.Since(start)))
	return release{Label: "v2", Revision: rev, Outcome: "Completed"}, nil
}

// unavailableRelease is v3: its pods lose readiness on the canary.
func (d *driver) unavailableRelease(ctx context.Context) (release, error) {
	fmt.Fprintf(d.out, "\nv3: a bad release. The workload simulator makes the pods of image :v3 lose readiness %s after\n"+
		"they start; noDisruption fails on the canary, and the policy (onFail: Rollback) rolls it back.\n", v3After)
	return d.rejectedRelease(ctx, "v3", "loses availability", faultRequest{Mode: string(simulator.LoseAvailability), After: v3After.String()})
}

// erroringRelease is v4: its pods stay ready while it answers errors, which only the service
// metrics see.
func (d *driver) erroringRelease(ctx context.Context) (release, error) {
	fmt.Fprintf(d.out, "\nv4: a bad release whose pods stay Available: the workload simulator makes the pods of image :v4\n"+
		"answer %.0f %% of their requests with errors, so every availability rule passes it. The policy's\n"+
		"errorRatio query, asked at the sandbox's Prometheus, compares the canary with the clusters still at\n"+
		"v2: noDisruption fails on the canary, and the policy rolls it back.\n", v4ErrorRatio*100)
	return d.rejectedRelease(ctx, "v4", "answers errors", faultRequest{ErrorRatio: v4ErrorRatio})
}

// rejectedRelease commits version with fault set on the pods of its image in every cluster:
// noDisruption fails on the canary, and the policy (onFail: Rollback) rolls it back and rejects
// it. It says why the gate failed, and clears the fault.
func (d *driver) rejectedRelease(ctx context.Context, version, misbehaves string, fault faultRequest) (release, error) {
	fault.Workload, fault.Image = webWorkload, ":"+version
	if err := d.ctl.setFault(ctx, fault); err != nil {
		return release{}, d.fail(version+": setting the simulator fault", err)
	}
	start := d.watch.reset()
	rev, err := d.commitRelease(ctx, version, nil)
	if err != nil {
		return release{}, d.fail(version+": committing the release", err)
	}
	fr, err := d.waitRollout(ctx, func(fr *v1alpha1.FleetRollout) (bool, error) {
		if candidateOf(fr) != rev {
			return false, nil
		}
		switch fr.Status.Phase {
		case v1alpha1.PhaseRolledBack:
			return true, nil
		case v1alpha1.PhaseCompleted:
			return false, fmt.Errorf("%s completed, but its canary %s and should have failed noDisruption", version, misbehaves)
		case v1alpha1.PhaseHeld:
			return false, fmt.Errorf("%s is held instead of rolled back: the policy in platform-policies should say onFail: \"Rollback\"", version)
		}
		return false, nil
	})
	if err != nil {
		return release{}, d.fail(fmt.Sprintf("%s: a release that %s should be rolled back", version, misbehaves), err)
	}
	if !fr.IsRejected(rev) {
		return release{}, d.fail(version+": a rolled-back release should be rejected", fmt.Errorf("status.rejected is %+v", fr.Status.Rejected))
	}
	why := d.failedGate(ctx, rev, v1alpha1.GateNoDisruption)
	fmt.Fprintf(d.out, "  %s was rolled back and is rejected (%s)\n  %s\n", version, roundDuration(time.Since(start)), why)
	if err := d.ctl.clearFault(ctx, "", webWorkload); err != nil {
		return release{}, d.fail(version+": clearing the simulator fault", err)
	}
	return release{Label: version, Revision: rev, Outcome: "RolledBack (rejected)"}, nil
}

// irreversibleRelease is v5: a change that going back cannot undo, blocked until it is approved.
func (d *driver) irreversibleRelease(ctx context.Context) (release, error) {
	fmt.Fprintf(d.out, "\nv5: a release that grows db's volume (volumeClaimTemplates 1Gi → 2Gi), which going back to v2\n"+
		"would not undo. rollbackSafe blocks it before the first wave, with nothing applied, until its\n"+
		"irreversible changes are approved.\n")
	start := d.watch.reset()
	rev, err := d.commitRelease(ctx, "v5", func(ctx context.Context, files map[string]string) error {
		p := d.pkg()
		db, err := d.ctl.readFile(ctx, repoPodinfo, p.storageFile)
		if err == nil {
			files[p.storageFile], err = p.setStorage(db, "1Gi", "2Gi")
		}
		return err
	})
	if err != nil {
		return release{}, d.fail("v5: committing the release", err)
	}
	_, err = d.waitRollout(ctx, func(fr *v1alpha1.FleetRollout) (bool, error) {
		if candidateOf(fr) != rev || len(fr.Status.Waves) == 0 {
			return false, nil
		}
		first := fr.Status.Waves[0]
		if first.StartedAt != nil {
			return false, fmt.Errorf("wave %s of v5 started: rollbackSafe should have blocked it", first.Name)
		}
		for _, g := range first.Gates {
			if g.Gate == v1alpha1.GateRollbackSafe && g.Result == v1alpha1.ResultFail {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return release{}, d.fail("v5: rollbackSafe should block the first wave", err)
	}
	fmt.Fprintf(d.out, "  v5 is blocked before its first wave, nothing applied.\n  %s\n", d.failedGate(ctx, rev, v1alpha1.GateRollbackSafe))
	approval := v1alpha1.Approval{Revision: rev, Irreversible: true, By: "demo", Reason: "db's volume grows; reviewed by the demo"}
	fmt.Fprintf(d.out, "  approving its irreversible changes, as `%s approve %s --revision %s --irreversible --by demo` would:\n"+
		"  spec.approvals += {revision: %s, irreversible: true, by: demo}\n", d.cli, rolloutName, shortRevision(rev), shortRevision(rev))
	if err := d.approve(ctx, approval); err != nil {
		return release{}, d.fail("v5: approving the irreversible change", err)
	}
	if _, err := d.waitRollout(ctx, completes(rev, "v5")); err != nil {
		return release{}, d.fail("v5: an approved release should complete", err)
	}
	fmt.Fprintf(d.out, "  v5 runs everywhere (%s)\n", roundDuration(time.Since(start)))
	return release{Label: "v5", Revision: rev, Outcome: "Completed after approval"}, nil
}

// record says, for each release, what its ledger holds and whether it verifies with the sandbox's
// public key, as tidegate receipts export and verify --bundle would check it.
func (d *driver) record(ctx context.Context, releases []release) (string, error) {
	l := layout{d.st.Dir}
	pubPEM, err := os.ReadFile(l.signingPub())
	if err != nil {
		return "", err
	}
	pub, err := attest.ParsePublicKey(pubPEM)
	if err != nil {
		return "", fmt.Errorf("%s: %w", l.signingPub(), err)
	}
	keys := attest.NewKeySet(pub)
	var b strings.Builder
	fmt.Fprintf(&b, "The record of each release, signed by the sandbox's key %s (%s), checked as `%s receipts verify --bundle FILE --key %s` checks an exported bundle:\n\n",
		short(pub.KeyID()), l.signingPub(), d.cli, l.signingPub())
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tLEDGER\tENTRIES\tRECEIPTS\tSIGNED\tOUTCOME\tVERIFIED")
	for _, rel := range releases {
		bundle, _, err := ops.ExportBundle(ctx, d.c, d.st.Namespace, rolloutName, rel.Revision)
		if ops.CodeOf(err) == ops.CodeUnmet {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\tno ledger\n", rel.Label)
			continue
		}
		if err != nil {
			return "", err
		}
		signed := 0
		for _, br := range bundle.Receipts {
			if br.Receipt.Spec.Signature != nil {
				signed++
			}
		}
		v := attest.Verify(bundle, keys)
		verified := "yes"
		if !v.Verified {
			f := v.Failures()[0]
			verified = fmt.Sprintf("NO: %d checks failed, first %s %s: %s", len(v.Failures()), f.Record, f.Check, f.Detail)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d of %d\t%s\t%s\n", rel.Label, bundle.Ledger.Name, len(bundle.Ledger.Spec.Entries), len(bundle.Receipts),
			signed, len(bundle.Receipts), orDash(bundle.Ledger.Spec.Outcome), verified)
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nExport one and check it offline:\n  %s receipts export --rollout %s --revision REVISION -f %s.bundle.json --kubeconfig %s\n  %s receipts verify --bundle %s.bundle.json --key %s\n",
		d.cli, rolloutName, rolloutName, l.kubeconfig(), d.cli, rolloutName, l.signingPub())
	return b.String(), nil
}

// short is a key id's first 12 characters.
func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// completes is done when rev runs everywhere, and fails when it is held or rolled back.
func completes(rev, label string) func(*v1alpha1.FleetRollout) (bool, error) {
	return func(fr *v1alpha1.FleetRollout) (bool, error) {
		if candidateOf(fr) != rev {
			return false, nil
		}
		switch fr.Status.Phase {
		case v1alpha1.PhaseCompleted:
			return true, nil
		case v1alpha1.PhaseHeld, v1alpha1.PhaseRolledBack, v1alpha1.PhaseRollingBack:
			return false, fmt.Errorf("%s is %s: %s", label, fr.Status.Phase, whyNotCompleted(fr))
		}
		return false, nil
	}
}

const noGateFailed = "no gate failed"

// whyNotCompleted says why a rollout that should have completed did not: the gates that failed,
// or, when none did (a wave that could not be judged, a candidate no cluster is Ready at), what
// its Ready condition says.
func whyNotCompleted(fr *v1alpha1.FleetRollout) string {
	if g := failedGates(fr); g != noGateFailed {
		return g
	}
	if c := apimeta.FindStatusCondition(fr.Status.Conditions, v1alpha1.ReadyCondition); c != nil && c.Message != "" {
		return noGateFailed + ", and Ready is " + conditionText(c)
	}
	return noGateFailed
}

// failedGates names the gates that failed in a rollout's waves.
func failedGates(fr *v1alpha1.FleetRollout) string {
	var out []string
	for _, w := range fr.Status.Waves {
		for _, g := range w.Gates {
			if g.Result == v1alpha1.ResultFail {
				out = append(out, fmt.Sprintf("%s failed in wave %s (receipt %s)", g.Gate, w.Name, g.Receipt))
			}
		}
	}
	if len(out) == 0 {
		return noGateFailed
	}
	return strings.Join(out, "; ")
}

// commitRelease commits version of the package (its release file, and what change adds) and
// returns the new revision.
func (d *driver) commitRelease(ctx context.Context, version string, change func(context.Context, map[string]string) error) (string, error) {
	p := d.pkg()
	k, err := d.ctl.readFile(ctx, repoPodinfo, p.releaseFile)
	if err != nil {
		return "", err
	}
	if k, err = p.setVersion(k, version); err != nil {
		return "", err
	}
	files := map[string]string{p.releaseFile: k}
	if change != nil {
		if err := change(ctx, files); err != nil {
			return "", err
		}
	}
	rev, err := d.ctl.commit(ctx, repoPodinfo, "podinfo "+version, files)
	if err != nil {
		return "", err
	}
	d.labels[rev] = version
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	pushed := ""
	if d.chart() {
		pushed = ", pushed as chart podinfo " + chartVersion(version)
	}
	fmt.Fprintf(d.out, "  committed %s to the podinfo repository%s: %s\n", strings.Join(names, " and "), pushed, shortRevision(rev))
	return rev, nil
}

// failedGate says which receipt failed gate for rev, and its first reason.
func (d *driver) failedGate(ctx context.Context, rev, gate string) string {
	receipts, err := d.receipts(ctx)
	if err != nil {
		return err.Error()
	}
	for i := len(receipts) - 1; i >= 0; i-- {
		rc := receipts[i]
		if rc.Spec.Candidate.Revision != rev || rc.Spec.Gate != gate || rc.Spec.Result != v1alpha1.ResultFail {
			continue
		}
		reason := "no reason recorded"
		if len(rc.Spec.Reasons) > 0 {
			reason = rc.Spec.Reasons[0]
			if n := len(rc.Spec.Reasons) - 1; n > 0 {
				reason += fmt.Sprintf(" (and %d more)", n)
			}
		}
		return fmt.Sprintf("%s failed in wave %s on %s (receipt %s): %s", gate, rc.Spec.Wave, strings.Join(rc.Spec.Targets, ", "), rc.Name, clip(reason, 300))
	}
	return fmt.Sprintf("no failed %s receipt of %s found", gate, d.label(rev))
}

// receipts lists the rollout's receipts, oldest first.
func (d *driver) receipts(ctx context.Context) ([]v1alpha1.GateReceipt, error) {
	var list v1alpha1.GateReceiptList
	if err := d.c.List(ctx, &list, client.InNamespace(d.st.Namespace), client.MatchingLabels{v1alpha1.RolloutLabel: rolloutName}); err != nil {
		return nil, fmt.Errorf("listing the gate receipts of %s: %w", rolloutName, err)
	}
	sort.SliceStable(list.Items, func(i, j int) bool {
		return list.Items[i].Spec.EvaluatedAt.Before(&list.Items[j].Spec.EvaluatedAt)
	})
	return list.Items, nil
}

// approve appends a to the rollout's spec.approvals with a merge patch that fails on a concurrent
// change (and is then read and applied again), as `tidegate approve` does.
func (d *driver) approve(ctx context.Context, a v1alpha1.Approval) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var fr v1alpha1.FleetRollout
		if err := d.c.Get(ctx, types.NamespacedName{Namespace: d.st.Namespace, Name: rolloutName}, &fr); err != nil {
			return err
		}
		before := fr.DeepCopy()
		fr.Spec.Approvals = append(fr.Spec.Approvals, a)
		return d.c.Patch(ctx, &fr, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), client.FieldOwner(demoFieldManager))
	})
}

// summary is the table of every gate decision of the releases.
func (d *driver) summary(ctx context.Context, releases []release) (string, error) {
	receipts, err := d.receipts(ctx)
	if err != nil {
		return "", err
	}
	var fr v1alpha1.FleetRollout
	if err := d.c.Get(ctx, types.NamespacedName{Namespace: d.st.Namespace, Name: rolloutName}, &fr); err != nil {
		return "", err
	}
	waves := make([]string, 0, len(fr.Spec.Waves))
	for _, w := range fr.Spec.Waves {
		waves = append(waves, w.Name)
	}
	return summaryTable(receipts, waves, releases), nil
}
