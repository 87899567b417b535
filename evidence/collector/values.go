package collector

import (
	"context"
	"encoding/json"
	"fmt"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/install"
	"github.com/tidegate/tidegate/evidence/preflight"
	"github.com/tidegate/tidegate/verdict"
)

// waveValues are the install-time values of a wave's targets: the rollout's
// (spec.template.postBuild.substitute), and for each target whose FleetCluster sets values of its
// own (spec.values), those merged over the rollout's (v1alpha1.FleetRollout.InstallValues), as the
// target's Kustomization gets them.
type waveValues struct {
	rollout map[string]string
	// own are the targets that set values of their own, in the order of targets.
	own []clusterValues
	// shared is true when a target uses the rollout's values as they are (or there is no target).
	shared bool
}

type clusterValues struct {
	name   string
	values map[string]string
}

func valuesOf(fr *v1alpha1.FleetRollout, targets []string, clusters map[string]*v1alpha1.FleetCluster) waveValues {
	v := waveValues{rollout: fr.InstallValues(nil), shared: len(targets) == 0}
	for _, name := range targets {
		fc := clusters[name]
		if fc == nil || len(fc.Spec.Values) == 0 {
			v.shared = true
			continue
		}
		v.own = append(v.own, clusterValues{name: name, values: fr.InstallValues(fc)})
	}
	return v
}

// check is the install half of deploySafe's evidence: the rollout's values checked against the
// package's schema when some target uses them as they are, and each target that sets values of
// its own checked with its merged values, listed when it has a finding. A schema that does not
// compile is one violation.
func (v waveValues) check(schema []byte) verdict.InstallEvidence {
	sets := make([]map[string]string, 0, len(v.own)+1)
	sets = append(sets, v.rollout)
	for _, o := range v.own {
		sets = append(sets, o.values)
	}
	evs, err := install.CheckEach(schema, sets)
	if err != nil {
		return verdict.InstallEvidence{Schema: true, Violations: []string{err.Error()}}
	}
	ev := verdict.InstallEvidence{Schema: evs[0].Schema}
	if v.shared {
		ev.UnknownKeys, ev.ProtectedKeys, ev.Violations = evs[0].UnknownKeys, evs[0].ProtectedKeys, evs[0].Violations
	}
	for i, o := range v.own {
		e := evs[i+1]
		if len(e.UnknownKeys)+len(e.ProtectedKeys)+len(e.Violations) > 0 {
			ev.Clusters = append(ev.Clusters, verdict.InstallFindings{Name: o.name, UnknownKeys: e.UnknownKeys, ProtectedKeys: e.ProtectedKeys, Violations: e.Violations})
		}
	}
	return ev
}

// substituteOwnValues has each target whose FleetCluster sets values of its own preflighted with
// the objects its Kustomization applies (the build substituted with its postBuild, the cluster's
// values merged over the rollout's); the others are preflighted with the objects a cluster without
// values of its own applies.
func substituteOwnValues(fr *v1alpha1.FleetRollout, clusters map[string]*v1alpha1.FleetCluster, targets []preflight.Target, pkg *renderedPackage) {
	for i := range targets {
		fc := clusters[targets[i].Name]
		if fc == nil || len(fc.Spec.Values) == 0 {
			continue
		}
		targets[i].Objects = func() ([]*unstructured.Unstructured, error) {
			objs, err := pkg.Build.Substitute(fr.PostBuild(fc))
			if err != nil {
				return nil, fmt.Errorf("postBuild substitution with the cluster's values (spec.values): %w", err)
			}
			return objs, nil
		}
	}
}

// classifyEach classifies going back from cand to good (nil on a first rollout) with the objects
// each target's Kustomization applies, once per distinct postBuild among the targets, and merges
// the findings: a cluster's own values can make a change matter (a claim's size, a storage
// class) that the rollout's values do not. goodFR and fr are the rollout with the known-good's and
// the candidate's build (v1alpha1.FleetRollout.Built): each side is substituted as its clusters
// get it. For a chart the objects are the release's, rendered with each distinct values
// (objectsOf); a render that came to no result is an *unfinishedRender.
func (c *Collector) classifyEach(ctx context.Context, goodFR, fr *v1alpha1.FleetRollout, targets []string, clusters map[string]*v1alpha1.FleetCluster, good, cand *renderedPackage) (evidence.RollbackSafety, error) {
	owners := []*v1alpha1.FleetCluster{nil}
	for _, name := range targets {
		if fc := clusters[name]; fc != nil && len(fc.Spec.Values) > 0 {
			owners = append(owners, fc)
		}
	}
	var out evidence.RollbackSafety
	seen := map[string]bool{}
	for i, fc := range owners {
		key, err := valuesKey(goodFR, fr, fc)
		if err != nil {
			return out, err
		}
		if seen[string(key)] {
			continue
		}
		seen[string(key)] = true
		whose := "the rollout's values"
		if fc != nil {
			whose = "cluster " + fc.Name + "'s values"
		}
		how := "postBuild substitution"
		if fr.IsChart() {
			how = "render"
		}
		objs, err := c.objectsOf(ctx, fr, fc, cand)
		if err != nil {
			return out, fmt.Errorf("the candidate's %s with %s: %w", how, whose, err)
		}
		var g []*unstructured.Unstructured
		if good != nil {
			if g, err = c.objectsOf(ctx, goodFR, fc, good); err != nil {
				return out, fmt.Errorf("the known-good's %s with %s: %w", how, whose, err)
			}
		}
		diff := evidence.ClassifyRollback(g, objs)
		if i == 0 {
			out = diff
		} else {
			out.Merge(diff)
		}
	}
	return out, nil
}

// valuesKey is what cluster fc's values are on both sides of going back: the postBuild of its
// Kustomizations, or the values of its HelmReleases for a chart. Clusters with equal keys get
// the same objects.
func valuesKey(goodFR, fr *v1alpha1.FleetRollout, fc *v1alpha1.FleetCluster) ([]byte, error) {
	if !fr.IsChart() {
		return json.Marshal([]*kustomizev1.PostBuild{goodFR.PostBuild(fc), fr.PostBuild(fc)})
	}
	good, err := goodFR.ChartValues(fc)
	if err != nil {
		return nil, err
	}
	cand, err := fr.ChartValues(fc)
	if err != nil {
		return nil, err
	}
	return json.Marshal([]map[string]any{good, cand})
}

// substituteFromLimits says what the evidence leaves out of spec.template.postBuild.substituteFrom.
func substituteFromLimits(fr *v1alpha1.FleetRollout) []string {
	if pb := fr.Spec.Template.PostBuild; pb != nil && len(pb.SubstituteFrom) > 0 {
		return []string{"variables from spec.template.postBuild.substituteFrom (ConfigMaps and Secrets) are not read: the objects are substituted with spec.template.postBuild.substitute and the clusters' spec.values only, and those values are not checked against the install schema"}
	}
	return nil
}
