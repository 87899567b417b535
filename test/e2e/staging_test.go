package e2e

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/controllers"
	"github.com/tidegate/tidegate/test/testenv"
)

// shopPackage reads testdata/packages/shop, a package laid out as an application's repository keeps
// it (base/ and overlays/staging/), as files of a repository: path → content.
func shopPackage(t *testing.T) map[string]string {
	t.Helper()
	root := filepath.Join(testenv.RepoRoot(), "testdata", "packages", "shop")
	files := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// An unmodified application's staging overlay — a Deployment its HorizontalPodAutoscaler scales, a
// claim it mounts, a StatefulSet with a volumeClaimTemplate, a CronJob, a generated ConfigMap and
// Services — completes every wave under Flux's health check of every object (wait: true), then so
// does a release of it. It needs the simulator's claims, volumes and autoscalers: without them the
// claim stays Pending and the canary's health check never passes. On every member the claims are
// bound, the autoscaler holds the Deployment at its staging minimum, and the CronJob's Job, once
// triggered, completes.
func TestE2EStagingOverlayCompletesEveryWave(t *testing.T) {
	parallel(t)
	files := shopPackage(t)
	s, first := newFleetSetup(t, 4, files)
	startTidegate(t, s, controllers.Options{})
	ctx, cancel := testContext(t, 8*time.Minute)
	defer cancel()
	fr := threeWaveRollout(s.ns, "shop")
	fr.Spec.Path = "./overlays/staging"
	if err := s.f.Hub.Create(ctx, fr); err != nil {
		t.Fatal(err)
	}

	rev1 := s.repo.Revision(first)
	done := s.waitPhase(ctx, t, "shop", v1alpha1.PhaseCompleted, rev1)
	checkWaveOrder(t, done)
	for _, w := range done.Status.Waves {
		if len(w.Clusters) == 0 {
			t.Errorf("wave %s had no cluster: %+v", w.Name, done.Status.Waves)
		}
	}
	s.shopRunsEverywhere(ctx, t, "1.4.0")

	const staging = "overlays/staging/kustomization.yaml"
	files[staging] = strings.Replace(files[staging], "newTag: 1.4.0", "newTag: 1.5.0", 1)
	rev2 := s.commitFiles(t, "shop 1.5.0", files)
	done = s.waitPhase(ctx, t, "shop", v1alpha1.PhaseCompleted, rev2)
	checkWaveOrder(t, done)
	s.shopRunsEverywhere(ctx, t, "1.5.0")

	// The nightly report, triggered on the canary, runs to completion.
	canary := done.Status.Waves[0].Clusters[0]
	j, err := s.faults.sim.TriggerCronJob(ctx, canary, s.ns, "nightly-report", "")
	if err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "the triggered report complete on "+canary, func() (bool, string) {
		if err := s.f.Member(canary).Client.Get(ctx, client.ObjectKeyFromObject(j), j); err != nil {
			return false, err.Error()
		}
		for _, c := range j.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, describeJob(j)
	})
}

func describeJob(j *batchv1.Job) string {
	var b strings.Builder
	for _, c := range j.Status.Conditions {
		b.WriteString(string(c.Type) + "=" + string(c.Status) + " ")
	}
	return b.String()
}

// shopRunsEverywhere checks what each member runs of the shop package at tag: web at tag and scaled
// to the staging minimum by its autoscaler, which reports itself settled; the claims bound; the
// generated ConfigMap with the overlay's values; the CronJob.
func (s *fleetSetup) shopRunsEverywhere(ctx context.Context, t *testing.T, tag string) {
	t.Helper()
	for _, m := range s.members {
		c := m.Client
		var d appsv1.Deployment
		if err := c.Get(ctx, keyOf(s.ns, "web"), &d); err != nil {
			t.Errorf("%s: web: %v", m.Name, err)
			continue
		}
		if img := d.Spec.Template.Spec.Containers[0].Image; img != "ghcr.io/example/shop:"+tag ||
			d.Spec.Replicas == nil || *d.Spec.Replicas != 2 || d.Status.AvailableReplicas != 2 {
			t.Errorf("%s: web runs %s, %v replicas, %d available; want %s, 2 and 2", m.Name, img, d.Spec.Replicas, d.Status.AvailableReplicas, tag)
		}
		var h autoscalingv2.HorizontalPodAutoscaler
		if err := c.Get(ctx, keyOf(s.ns, "web"), &h); err != nil || h.Status.CurrentReplicas != 2 || h.Status.DesiredReplicas != 2 {
			t.Errorf("%s: autoscaler web %+v (err %v), want 2 current and desired", m.Name, h.Status, err)
		}
		for _, name := range []string{"uploads", "data-db-0"} {
			var pvc corev1.PersistentVolumeClaim
			if err := c.Get(ctx, keyOf(s.ns, name), &pvc); err != nil || pvc.Status.Phase != corev1.ClaimBound {
				t.Errorf("%s: claim %s %s (err %v), want Bound", m.Name, name, pvc.Status.Phase, err)
			}
		}
		var cms corev1.ConfigMapList
		if err := c.List(ctx, &cms, client.InNamespace(s.ns)); err != nil {
			t.Fatal(err)
		}
		generated := false
		for _, cm := range cms.Items {
			if strings.HasPrefix(cm.Name, "shop-config-") && cm.Data["ENVIRONMENT"] == "staging" && cm.Data["LOG_LEVEL"] == "debug" {
				generated = true
			}
		}
		if !generated {
			t.Errorf("%s: no generated shop-config-<hash> with the staging values", m.Name)
		}
		var cj batchv1.CronJob
		if err := c.Get(ctx, keyOf(s.ns, "nightly-report"), &cj); err != nil {
			t.Errorf("%s: CronJob nightly-report: %v", m.Name, err)
		}
	}
}
