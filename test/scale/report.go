package scale

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// Run is everything one run of the bench measured. A figure that could not be measured is printed
// as "not measured" or UNSET, never made up.
type Run struct {
	Config   Config
	Started  time.Duration // fleet, FleetClusters and controller up
	Releases []*Release
	Idle     *Idle
	Failure  *Failure
	Away     *OneAway
	Sizes    *Sizes
	Res      Resources
	Errors   []string
	Wall     time.Duration
}

// Label says what played Flux, in every figure's heading.
func (r *Run) Label() string {
	c := r.Config
	if c.Flux == StandIn {
		p := c.StandIn.Pace
		rate := "unbounded"
		if p.Rate > 0 {
			rate = fmt.Sprintf("at most %g/s", p.Rate)
		}
		refresh := p.RefreshLatency
		if refresh <= 0 {
			refresh = latencyOr(p.ApplyLatency)
		}
		qps := "50"
		if c.StandInQPS > 0 {
			qps = fmt.Sprint(c.StandInQPS)
		}
		return fmt.Sprintf("simulated Flux (stand-in: %d workers, %s per apply, %s per re-reconcile, %s, client %s QPS)",
			workersOr(c.StandIn.Workers), latencyOr(p.ApplyLatency), refresh, rate, qps)
	}
	return fmt.Sprintf("real Flux (kustomize-controller --concurrent=%d)", c.KustomizeConcurrency)
}

func workersOr(n int) int {
	if n <= 0 {
		return 20
	}
	return n
}

func latencyOr(d time.Duration) time.Duration {
	if d <= 0 {
		return 2 * time.Second
	}
	return d
}

// Print writes the run's tables (Markdown).
func (r *Run) Print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "\n## %d FleetClusters on %d member API servers, %s\n\n", c.Clusters, c.Members, r.Label())
	fmt.Fprintf(w, "Waves: canary 1, ring %d %%, rest; soak %s each (%s while v1 installs); Kustomization interval %s, timeout %s. Bench wall time %s (setup %s).\n",
		c.RingPercent, c.Soak, c.SetupSoak, c.Interval, c.Timeout, r.Wall.Round(time.Second), r.Started.Round(time.Second))
	for _, e := range r.Errors {
		fmt.Fprintf(w, "\n**error:** %s\n", e)
	}

	fmt.Fprintf(w, "\n### Releases (%s)\n\n", fluxWord(c))
	table(w, []string{"release", "outcome", "commit → canary switch", "commit → end", "Kustomization writes per cluster (mean / max)",
		"pinned sources created / refused", "reconciles: fleetrollout / fleetcluster", "hub requests", "member requests", "tidegate CPU s", "kustomize-controller CPU s"},
		func(row func(...string)) {
			for _, rel := range r.Releases {
				since := ""
				if !rel.ReconcilesSince.IsZero() {
					since = " (since restart)"
				}
				row(rel.Name, rel.Outcome, durSince(rel.Start, rel.FirstSwitch), rel.End.Sub(rel.Start).Round(time.Second).String(),
					fmt.Sprintf("%.2f / %d", rel.KustomizationWrites.PerObject(), rel.KustomizationWrites.Max),
					fmt.Sprintf("%d / %d", rel.PinnedCreated, rel.PinnedRefused),
					reconcileCounts(rel.Reconciles, rel.End.Sub(reconcilesFrom(rel)), since),
					fmt.Sprint(rel.Hub.Total()), fmt.Sprint(rel.Members.Total()), cpuOf(rel.CPU.Tidegate, rel.CPU.TidegateMeasured), kustomizeCPU(rel.CPU))
			}
		})

	fmt.Fprintf(w, "\n### Decision latency per wave transition (%s)\n\n", fluxWord(c))
	fmt.Fprintln(w, "Last Ready: the last member of the wave Ready at the candidate, as the bench's watch saw it. Soak end: last Ready + soak."+
		" Decision: the next wave's first Kustomization switch (or Completed). p50/p99: every switch of the next wave, from soak end."+
		" The controller counts the soak from status.waves[].readyAt, which it records to the second (truncated): a decision up to 1 s before the bench's soak end shows as negative.")
	fmt.Fprintln(w)
	table(w, []string{"release", "transition", "next wave", "last Ready → decision", "soak end → decision", "soak end → switch p50", "p99", "all switched", "controller readyAt − last Ready"},
		func(row func(...string)) {
			for _, rel := range r.Releases {
				if !rel.ReconcilesSince.IsZero() {
					row(rel.Name, "held and restarted: see below", "", "", "", "", "", "", "")
					continue
				}
				for i, t := range rel.Transitions {
					p50, ok50 := t.Percentile(50)
					p99, ok99 := t.Percentile(99)
					lag := "UNSET"
					for _, wv := range rel.Waves {
						if wv.Name == t.From && !wv.ControllerReadyAt.IsZero() {
							lag = secs(wv.ControllerReadyAt.Sub(t.LastReady))
						}
					}
					all := "-"
					if i+1 < len(rel.Waves) && !rel.Waves[i+1].LastSwitch.IsZero() {
						all = secs(rel.Waves[i+1].LastSwitch.Sub(t.SoakEnd))
					}
					size := fmt.Sprint(t.Size)
					if i+1 >= len(rel.Waves) {
						size = "-"
					}
					row(rel.Name, t.From+" → "+t.To, size, secs(t.FromReady()), secs(t.FromSoakEnd()), optSecs(p50, ok50), optSecs(p99, ok99), all, lag)
				}
			}
		})

	fmt.Fprintf(w, "\n### Gates (%s)\n\n", fluxWord(c))
	fmt.Fprintln(w, "Decided in: from the start of the reconcile that decided it (the controller's uncached read of the rollout), or the previous receipt of that reconcile, to its receipt's create; collection, evaluation and the write."+
		" Mid re-reconcile: members whose Kustomization was Ready or Healthy Unknown at the applied revision at that moment.")
	fmt.Fprintln(w)
	table(w, []string{"release", "wave", "gate", "result", "decided in", "mid re-reconcile"}, func(row func(...string)) {
		for _, rel := range r.Releases {
			for _, g := range rel.Gates {
				res := g.Result
				if g.Refused {
					res += " (receipt existed)"
				}
				mid := ""
				if g.Gate == v1alpha1.GateNoDisruption {
					mid = fmt.Sprint(g.Transient)
				}
				row(rel.Name, g.Wave, g.Gate, res, secs(g.Took), mid)
			}
		}
	})

	fmt.Fprintf(w, "\n### Preflights and sampling on the members (%s)\n\n", fluxWord(c))
	fmt.Fprintln(w, "From the members' audit logs (the controller's User-Agent). A preflight is a run of dry-run requests with gaps under 2 s."+
		" Sampling: the workload reads while the wave soaked (its last member Ready → the next decision); a pass is a run of reads with gaps under 1 s"+
		" (two passes back to back count as one: see reads per pass).")
	fmt.Fprintln(w)
	table(w, []string{"release", "preflights: requests in", "wave soaking", "soak window", "reads (per member)", "passes", "pass took p50 / max", "reads per pass (max)", "longest gap between passes"},
		func(row func(...string)) {
			for _, rel := range r.Releases {
				var pf []string
				for _, b := range rel.Preflights {
					pf = append(pf, fmt.Sprintf("%d in %s", b.Requests, secs(b.Took)))
				}
				if len(rel.Sampling) == 0 {
					row(rel.Name, strings.Join(pf, "; "), "UNSET", "", "", "", "", "", "")
				}
				for i, ws := range rel.Sampling {
					var took []time.Duration
					maxReq, gap := 0, time.Duration(0)
					for j, b := range ws.Passes {
						took = append(took, b.Took)
						maxReq = max(maxReq, b.Requests)
						if j > 0 {
							gap = max(gap, b.Start.Sub(ws.Passes[j-1].Start.Add(ws.Passes[j-1].Took)))
						}
					}
					p50, ok := percentile(took, 50)
					pmax, _ := percentile(took, 100)
					preflights := ""
					if i == 0 {
						preflights = strings.Join(pf, "; ")
					}
					perMember := "-"
					if ws.Size > 0 {
						perMember = fmt.Sprintf("%.1f", float64(ws.Reads)/float64(ws.Size))
					}
					row(rel.Name, preflights, fmt.Sprintf("%s (%d)", ws.Wave, ws.Size), secs(ws.Window), fmt.Sprintf("%d (%s)", ws.Reads, perMember),
						fmt.Sprint(len(ws.Passes)), optSecs(p50, ok)+" / "+optSecs(pmax, ok), fmt.Sprint(maxReq), secs(gap))
				}
			}
		})

	if id := r.Idle; id != nil {
		fmt.Fprintf(w, "\n### Idle: %s with nothing changing (%s)\n\n", id.Window.Round(time.Second), fluxWord(c))
		refresh := "not measured (real Flux)"
		if c.Flux == StandIn {
			refresh = fmt.Sprint(id.FluxRefreshes)
		}
		mins := id.Window.Minutes()
		table(w, []string{"writes", "create attempts", "fleetrollout reconciles (per min)", "fleetcluster reconciles (per min)", "Flux re-reconciles", "hub requests", "member requests", "tidegate CPU s"},
			func(row func(...string)) {
				row(fmt.Sprint(id.Writes), fmt.Sprint(id.Creates),
					perMinute(id.Reconciles, "fleetrollout", mins), perMinute(id.Reconciles, "fleetcluster", mins),
					refresh, fmt.Sprint(id.Hub.Total()), fmt.Sprint(id.Members.Total()), cpuOf(id.CPU.Tidegate, id.CPU.TidegateMeasured))
			})
		fmt.Fprintln(w)
		r.printRequests(w, id)
	}

	if f := r.Failure; f != nil {
		fmt.Fprintf(w, "\n### Hold, restart and a failed wave (%s)\n\n", fluxWord(c))
		table(w, []string{"what", "figure"}, func(row func(...string)) {
			row("hold set → status Held", durSince(f.HoldSet, f.Held)+fmt.Sprintf(" (%d reconciles began in between)", f.HoldReconciles))
			row("clusters switched while held", fmt.Sprintf("%d (held %s, past the canary's soak)", f.SwitchedWhileHeld, f.HeldFor.Round(time.Second)))
			row("restart → informers synced (ready)", durSince(f.Started, f.Ready))
			row("restart → next decision (first receipt or Kustomization write)", durSince(f.Started, f.NextDecision))
			row("restart → first gate receipt", durSince(f.Started, f.FirstReceipt))
			row("restart → the ring's first switch", durSince(f.Started, f.FirstSwitch))
			row("clusters where the revision fails", fmt.Sprint(f.Failing))
			row("commit → RollingBack", durSince(f.Release.Start, f.RollingBack))
			row("RollingBack → RolledBack", durSince(f.RollingBack, f.RolledBack))
			row("RollingBack → last updated cluster Ready at the known-good", durSince(f.RollingBack, f.LastBackReady))
			row("updated / switched back / Ready at the known-good", fmt.Sprintf("%d / %d / %d", f.Updated, f.Back, f.BackReady))
			row("Kustomization writes per cluster in the rollback (mean / max)", fmt.Sprintf("%.2f / %d", f.RollbackWrites.PerObject(), f.RollbackWrites.Max))
		})
	}

	if a := r.Away; a != nil && a.Wave != "" {
		fmt.Fprintf(w, "\n### One cluster away at the last wave (%s)\n\n", fluxWord(c))
		fmt.Fprintln(w, "One cluster of the last wave does not answer (its kubeconfig names an address nothing listens on) when the release reaches that wave:"+
			" the wave's deploySafe is Inconclusive about it and decided again while it waits. Counted from the wave's first decision (its own requests excluded),"+
			" over the window: the decisions made again and the controller's dry-runs on the members (from their audit logs).")
		fmt.Fprintln(w)
		table(w, []string{"release", "wave (members)", "cluster away", "window", "decisions again", "member dry-runs", "dry-runs per minute"}, func(row func(...string)) {
			row(a.Release.Name, fmt.Sprintf("%s (%d)", a.Wave, a.WaveMembers), a.Cluster, a.Window.Round(time.Second).String(), fmt.Sprint(a.Decisions),
				fmt.Sprint(a.DryRuns), fmt.Sprintf("%.1f", float64(a.DryRuns)/a.Window.Minutes()))
		})
	}

	fmt.Fprintf(w, "\n### Controller resources and object sizes (%s)\n\n", fluxWord(c))
	table(w, []string{"what", "figure"}, func(row func(...string)) {
		if r.Res.Measured {
			row("controller CPU, whole run", fmt.Sprintf("%.1f s", r.Res.Usage.CPUSeconds))
			row("peak RSS (VmHWM)", mib(float64(r.Res.Usage.PeakRSS)))
		} else {
			row("controller CPU, whole run", "not measured (controller in-process)")
			row("peak RSS (VmHWM)", "not measured (controller in-process)")
		}
		row("peak live heap (go_memstats_heap_alloc_bytes, 5 s scrapes)", mibOr(r.Res.PeakHeap))
		row("peak RSS (process_resident_memory_bytes, 5 s scrapes)", mibOr(r.Res.PeakRSS))
		for _, rel := range r.Releases {
			if rel.CPU.KustomizeMeasured && rel.CPU.Kustomize > 0 {
				row("tidegate CPU share vs kustomize-controller, "+rel.Name, fmt.Sprintf("%.0f %% (%.1f s vs %.1f s)", 100*rel.CPU.Tidegate/rel.CPU.Kustomize, rel.CPU.Tidegate, rel.CPU.Kustomize))
			} else if c.Flux == StandIn {
				row("tidegate CPU share vs kustomize-controller, "+rel.Name, "not measured (simulated Flux)")
			}
		}
		if s := r.Sizes; s != nil {
			row("FleetRollout (JSON), status alone", fmt.Sprintf("%s, %s", kib(s.Rollout), kib(s.RolloutStatus)))
			row("largest GateReceipt (JSON)", fmt.Sprintf("%s (%s, of %d)", kib(s.Receipt), s.ReceiptName, s.Receipts))
		} else {
			row("object sizes", "UNSET")
		}
	})
}

// printRequests is the controller's requests during the idle window and the second release, by
// verb and resource, per FleetRollout reconcile.
func (r *Run) printRequests(w io.Writer, id *Idle) {
	var rel *Release
	for _, x := range r.Releases {
		if x.ReconcilesSince.IsZero() && strings.HasPrefix(x.Name, "release") {
			rel = x
			break
		}
	}
	perIdle := id.Reconciles["fleetrollout"]
	fmt.Fprintln(w, "Hub requests by the controller (both its controllers), by verb and resource, and per FleetRollout reconcile:")
	fmt.Fprintln(w)
	keys := id.Hub.Keys()
	header := []string{"request", "idle", "per reconcile (idle)"}
	if rel != nil {
		keys = mergeKeys(keys, rel.Hub.Keys())
		header = append(header, rel.Name, "per reconcile ("+rel.Name+")")
	}
	table(w, header, func(row func(...string)) {
		for _, k := range keys {
			cells := []string{k, fmt.Sprint(id.Hub[k]), per(id.Hub[k], perIdle)}
			if rel != nil {
				cells = append(cells, fmt.Sprint(rel.Hub[k]), per(rel.Hub[k], rel.Reconciles["fleetrollout"]))
			}
			row(cells...)
		}
	})
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Member requests by the controller, by verb:")
	fmt.Fprintln(w)
	mi := id.Members.ByVerb()
	var mr Counts
	mkeys := mi.Keys()
	if rel != nil {
		mr = rel.Members.ByVerb()
		mkeys = mergeKeys(mkeys, mr.Keys())
	}
	table(w, []string{"verb", "idle", "per reconcile (idle)", "release", "per reconcile (release)"}, func(row func(...string)) {
		for _, k := range mkeys {
			cells := []string{k, fmt.Sprint(mi[k]), per(mi[k], perIdle), "", ""}
			if rel != nil {
				cells[3], cells[4] = fmt.Sprint(mr[k]), per(mr[k], rel.Reconciles["fleetrollout"])
			}
			row(cells...)
		}
	})
}

// Summary prints one line per run: the figures the targets are about.
func Summary(w io.Writer, runs []*Run) {
	fmt.Fprintln(w, "\n## Summary")
	fmt.Fprintln(w)
	table(w, []string{"clusters", "Flux", "healthy release", "soak end → decision, worst transition", "KS writes per cluster per release (max)",
		"idle writes / creates", "idle reconciles per min", "restart → next decision", "failed wave rolled back", "peak RSS", "largest receipt", "tidegate / kustomize-controller CPU"},
		func(row func(...string)) {
			for _, r := range runs {
				var healthy *Release
				var worst *time.Duration
				maxWrites := 0
				for _, rel := range r.Releases {
					if rel.Name == "release v2" {
						healthy = rel
					}
					if rel.ReconcilesSince.IsZero() {
						maxWrites = max(maxWrites, rel.KustomizationWrites.Max)
					}
				}
				outcome, share := "UNSET", "not measured"
				if healthy != nil {
					outcome = healthy.Outcome + " in " + healthy.End.Sub(healthy.Start).Round(time.Second).String()
					for _, t := range healthy.Transitions {
						if d := t.FromSoakEnd(); worst == nil || d > *worst {
							worst = &d
						}
					}
					if healthy.CPU.KustomizeMeasured && healthy.CPU.Kustomize > 0 {
						share = fmt.Sprintf("%.0f %%", 100*healthy.CPU.Tidegate/healthy.CPU.Kustomize)
					}
				}
				idleW, idleR := "UNSET", "UNSET"
				if r.Idle != nil {
					idleW = fmt.Sprintf("%d / %d", r.Idle.Writes, r.Idle.Creates)
					idleR = perMinute(r.Idle.Reconciles, "fleetrollout", r.Idle.Window.Minutes())
				}
				restart, rolled := "UNSET", "UNSET"
				if f := r.Failure; f != nil {
					restart = durSince(f.Started, f.NextDecision)
					rolled = fmt.Sprintf("%s: %d of %d back", f.Release.Outcome, f.BackReady, f.Updated)
				}
				rss := "not measured"
				if r.Res.Measured {
					rss = mib(float64(r.Res.Usage.PeakRSS))
				}
				receipt := "UNSET"
				if r.Sizes != nil {
					receipt = kib(r.Sizes.Receipt)
				}
				ws := "UNSET"
				if worst != nil {
					ws = secs(*worst)
				}
				row(fmt.Sprint(r.Config.Clusters), string(r.Config.Flux), outcome, ws, fmt.Sprint(maxWrites), idleW, idleR, restart, rolled, rss, receipt, share)
			}
		})
}

// reconcileCounts is "fleetrollout / fleetcluster (fleetrollout per minute)", UNSET when the
// controller's metrics could not be read.
func reconcileCounts(m map[string]float64, over time.Duration, note string) string {
	if m == nil {
		return "UNSET"
	}
	return fmt.Sprintf("%.0f / %.0f%s (%.0f / min)", m["fleetrollout"], m["fleetcluster"], note, m["fleetrollout"]/over.Minutes())
}

func perMinute(m map[string]float64, controller string, mins float64) string {
	if m == nil {
		return "UNSET"
	}
	return fmt.Sprintf("%.0f (%.1f)", m[controller], m[controller]/mins)
}

// reconcilesFrom is when the release's reconcile count starts.
func reconcilesFrom(rel *Release) time.Time {
	if !rel.ReconcilesSince.IsZero() {
		return rel.ReconcilesSince
	}
	return rel.Start
}

func fluxWord(c Config) string { return string(c.Flux) }

func table(w io.Writer, header []string, rows func(row func(...string))) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(header, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat(" --- |", len(header)))
	n := 0
	rows(func(cells ...string) {
		n++
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	})
	if n == 0 {
		cells := make([]string, len(header))
		cells[0] = "UNSET"
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

func mergeKeys(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range append(a, b...) {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func per(n int, reconciles float64) string {
	if reconciles <= 0 {
		return "UNSET"
	}
	return fmt.Sprintf("%.2f", float64(n)/reconciles)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

func optSecs(d time.Duration, ok bool) string {
	if !ok {
		return "UNSET"
	}
	return secs(d)
}

// durSince is to − from, or UNSET when either was not seen.
func durSince(from, to time.Time) string {
	if from.IsZero() || to.IsZero() {
		return "UNSET"
	}
	return secs(to.Sub(from))
}

func cpuOf(s float64, measured bool) string {
	if !measured {
		return "not measured"
	}
	return fmt.Sprintf("%.1f", s)
}

func kustomizeCPU(c CPU) string {
	if !c.KustomizeMeasured {
		return "not measured (simulated Flux)"
	}
	return fmt.Sprintf("%.1f", c.Kustomize)
}

func mib(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }

func mibOr(b float64) string {
	if b <= 0 {
		return "UNSET"
	}
	return mib(b)
}

func kib(b int) string { return fmt.Sprintf("%.1f KiB", float64(b)/1024) }
