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

func stateOf(obj sourcev1.Source, name string, getter conditions.Getter) engine.SourceState {
	s := engine.SourceState{Name: name, Exists: true, Ready: conditions.IsReady(getter)}
	if c := conditions.Get(getter, meta.ReadyCondition); c != nil {
		s.Message = c.Message
	}
	if a := obj.GetArtifact(); a != nil {
		s.Revision, s.Digest, s.URL = a.Revision, a.Digest, a.URL
	}
	if c := conditions.Get(getter, sourcev1.SourceVerifiedCondition); c != nil {
		s.Verified, s.VerifyMessage = c.Status == metav1.ConditionTrue, c.Message
		s.VerifyFailed = c.Status == metav1.ConditionFalse && c.ObservedGeneration == getter.GetGeneration()
	}
	return s
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

// GetSource reads a Flux source of the rollout's namespace and returns its object and state.
func GetSource(ctx context.Context, c client.Reader, ns, kind, name string) (client.Object, engine.SourceState, error) {
	key := types.NamespacedName{Namespace: ns, Name: name}
	switch kind {
	case sourcev1.GitRepositoryKind:
		var o sourcev1.GitRepository
		if err := c.Get(ctx, key, &o); err != nil {
			return nil, engine.SourceState{Name: name}, err
		}
		s := stateOf(&o, name, &o)
		if o.Spec.Verification != nil {
			s.Verification = "openpgp" // the one provider GitRepository verifies commits and tags with
		}
		return &o, s, nil
	case sourcev1.OCIRepositoryKind:
		var o sourcev1.OCIRepository
		if err := c.Get(ctx, key, &o); err != nil {
			return nil, engine.SourceState{Name: name}, err
		}
		s := stateOf(&o, name, &o)
		if o.Spec.Verify != nil {
			s.Verification = o.Spec.Verify.Provider
		}
		return &o, s, nil
	}
	return nil, engine.SourceState{Name: name}, fmt.Errorf("source kind %q is not supported: use GitRepository or OCIRepository", kind)
}
