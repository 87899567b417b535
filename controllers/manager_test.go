package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestManagerOptions: every manager reads kubeconfig Secrets uncached and never binds :8080 by default.
func TestManagerOptions(t *testing.T) {
	o := ManagerOptions(ManagerConfig{})
	if o.Client.Cache == nil || len(o.Client.Cache.DisableFor) != 1 {
		t.Fatalf("client cache options = %+v, want Secrets read uncached", o.Client.Cache)
	}
	if _, ok := o.Client.Cache.DisableFor[0].(*corev1.Secret); !ok {
		t.Errorf("uncached kind = %T, want *corev1.Secret", o.Client.Cache.DisableFor[0])
	}
	if o.Metrics.BindAddress != "0" {
		t.Errorf("metrics bind address = %q, want %q (off)", o.Metrics.BindAddress, "0")
	}
	if o.Scheme == nil || o.Cache.DefaultTransform == nil {
		t.Errorf("scheme or managedFields stripping missing: %+v", o.Cache)
	}
	if on := ManagerOptions(ManagerConfig{LeaderElection: true}); !on.LeaderElection || on.LeaderElectionID != LeaderElectionID {
		t.Errorf("leader election = %v on %q", on.LeaderElection, on.LeaderElectionID)
	}
}
