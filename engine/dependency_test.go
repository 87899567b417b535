package engine

import (
	"strings"
	"testing"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// A member whose Kustomization kustomize-controller holds until a rollout it depends on is Ready
// there (DependencyNotReady) is not Ready and not failed: its wave waits for it, its status says
// which dependency it waits for, and the wave goes on once the dependency is Ready. Held past the
// wave's deadline, it is judged not Ready, as any member that never applied the candidate.
func TestAWaveWaitsForItsMembersDependencies(t *testing.T) {
	s := newSim(t, "a", "b")
	s.run("r1", v1alpha1.PhaseCompleted)
	const msg = "dependency 'fleet/platform-b' is not ready"
	s.dependency["b"] = msg
	s.untilWave("r2", 1, v1alpha1.WaveProgressing)
	for range 30 {
		s.once("r2")
	}
	rest := s.fr.Status.Waves[1]
	if rest.Phase != v1alpha1.WaveProgressing || s.fr.Status.Phase != v1alpha1.PhaseProgressing {
		t.Fatalf("the wave does not wait for b: %s, rollout %s", rest.Phase, s.fr.Status.Phase)
	}
	wf := s.fr.Status.WaitingFor
	if wf == nil || wf.Reason != v1alpha1.WaitingForMembers || wf.Until == nil ||
		!strings.Contains(wf.Message, "1 cluster is held by kustomize-controller until a rollout this one depends on (spec.template.dependsOn) is Ready there") ||
		!strings.Contains(wf.Message, "b: "+msg) {
		t.Fatalf("waitingFor %+v: want the members' wait, with its deadline, naming b's dependency", wf)
	}
	delete(s.dependency, "b")
	s.run("r2", v1alpha1.PhaseCompleted)

	s.dependency["b"] = msg
	s.runFor("r3", v1alpha1.PhaseHeld, 1000)
	if rest := s.fr.Status.Waves[1]; rest.Phase != v1alpha1.WaveFailed {
		t.Errorf("held past its deadline, the wave is %s, want Failed: b never applied r3", rest.Phase)
	}
}
