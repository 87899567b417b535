package collector

import (
	"context"
	"fmt"
	"strings"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/engine"
)

// stateOf is the state of a source, tracked or pinned, as every decision reads it. Its revision is
// the artifact's, a Flux artifact revision "<ref>@<algo>:<hash>", except a HelmChart's (chartRevision).
func stateOf(obj sourcev1.Source, name string, getter conditions.Getter) engine.SourceState {
	s := engine.SourceState{Name: name, Exists: true, Ready: conditions.IsReady(getter)}
	if c := conditions.Get(getter, meta.ReadyCondition); c != nil {
		s.Message = c.Message
	}
	if a := obj.GetArtifact(); a != nil {
		s.Revision, s.Digest, s.URL = a.Revision, a.Digest, a.URL
		if _, ok := obj.(*sourcev1.HelmChart); ok {
			s.Revision = chartRevision(a)
		}
	}
	if c := conditions.Get(getter, sourcev1.SourceVerifiedCondition); c != nil {
		s.Verified, s.VerifyMessage = c.Status == metav1.ConditionTrue, c.Message
		s.VerifyFailed = c.Status == metav1.ConditionFalse && c.ObservedGeneration == getter.GetGeneration()
	}
	return s
}

// chartRevision is the revision of a HelmChart's artifact: "<chart version>@<artifact digest>"
// (6.5.4@sha256:<hex>). source-controller's revision of a HelmChart is the chart's version alone,
// which names no content: a version re-published with other content would be the same revision.
// With the digest it is a Flux artifact revision like any other, so that SplitRevision,
// SameRevision, the pinned sources' names and the receipts' candidate digest read it as they read
// an OCIRepository's "<tag>@sha256:<hex>", and its ref is the version a pinned HelmChart asks for.
func chartRevision(a *meta.Artifact) string {
	if a.Revision == "" || a.Digest == "" || strings.Contains(a.Revision, "@") {
		return a.Revision
	}
	return a.Revision + "@" + a.Digest
}

// SignatureRefused tells whether a failed verification's message is a verdict on the signature:
// none was found, none matched the keys, or one did not verify (cosign, notation and OpenPGP say
// so in these words). Any other failure (the registry did not answer, the key Secret is missing)
// is verification that could not run, which observes nothing about the artifact.
func SignatureRefused(message string) bool {
	m := strings.ToLower(message)
	for _, phrase := range []string{"no matching signatures", "no signatures found", "invalid signature",
		"signature verification failed", "no signature is associated", "unable to verify"} {
		if strings.Contains(m, phrase) {
			return true
		}
	}
	return false
}

// source is a Flux source object as GetSource reads it.
type source interface {
	sourcev1.Source
	client.Object
	conditions.Getter
}

// GetSource reads a Flux source of the rollout's namespace and returns its object and state.
func GetSource(ctx context.Context, c client.Reader, ns, kind, name string) (client.Object, engine.SourceState, error) {
	var obj source
	// verification is the provider the source verifies its artifact with, "" when it verifies none.
	var verification func() string
	switch kind {
	case sourcev1.GitRepositoryKind:
		o := &sourcev1.GitRepository{}
		obj, verification = o, func() string {
			if o.Spec.Verification != nil {
				return "openpgp" // the one provider GitRepository verifies commits and tags with
			}
			return ""
		}
	case sourcev1.OCIRepositoryKind:
		o := &sourcev1.OCIRepository{}
		obj, verification = o, func() string {
			if o.Spec.Verify != nil {
				return o.Spec.Verify.Provider
			}
			return ""
		}
	case sourcev1.HelmChartKind:
		o := &sourcev1.HelmChart{}
		obj, verification = o, func() string {
			if o.Spec.Verify != nil {
				return o.Spec.Verify.Provider
			}
			return ""
		}
	default:
		return nil, engine.SourceState{Name: name}, fmt.Errorf("source kind %q is not supported: use GitRepository, OCIRepository or (for a chart) HelmChart", kind)
	}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
		return nil, engine.SourceState{Name: name}, err
	}
	s := stateOf(obj, name, obj)
	s.Verification = verification()
	return obj, s, nil
}
