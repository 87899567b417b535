package simulator

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// claim is a plain claim of size, as a package has one.
func claim(ns, name, size string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
}

// statefulSetWithClaims is statefulSet(replicas) with a volumeClaimTemplate "data" of 1Gi, labelled
// tier: db.
func statefulSetWithClaims(replicas int32) *appsv1.StatefulSet {
	s := statefulSet(replicas)
	tpl := claim("", "data", "1Gi")
	tpl.Labels = map[string]string{"tier": "db"}
	s.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{*tpl}
	return s
}

// The claims of a StatefulSet are named and labelled as the StatefulSet controller names them, from
// its first ordinal, without the template being changed; a deleted set makes none.
func TestSetClaimsAreTheStatefulSetControllers(t *testing.T) {
	s := statefulSetWithClaims(2)
	s.Spec.Ordinals = &appsv1.StatefulSetOrdinals{Start: 3}
	got := setClaims(s)
	if len(got) != 2 || got[0].Name != "data-db-3" || got[1].Name != "data-db-4" {
		t.Fatalf("claims %v, want data-db-3 and data-db-4", got)
	}
	for _, c := range got {
		if c.Namespace != "demo" || !maps.Equal(c.Labels, map[string]string{"tier": "db", "app": "web"}) ||
			c.Spec.Resources.Requests.Storage().String() != "1Gi" {
			t.Errorf("claim %s: namespace %s, labels %v, size %s; want demo, the template's and the selector's labels, 1Gi",
				c.Name, c.Namespace, c.Labels, c.Spec.Resources.Requests.Storage())
		}
	}
	if l := s.Spec.VolumeClaimTemplates[0].Labels; len(l) != 1 {
		t.Errorf("the template's labels changed to %v", l)
	}
	s.DeletionTimestamp = &metav1.Time{Time: t0}
	if got := setClaims(s); len(got) != 0 {
		t.Errorf("a deleted StatefulSet makes claims %v", got)
	}
}

// A claim kstatus reads as InProgress while Pending reads as Current once bound as the simulator
// binds it, to a volume of its size and access modes that points back at it.
func TestBoundClaimIsCurrent(t *testing.T) {
	c := claim("demo", "uploads", "5Gi")
	c.UID = "c-uid"
	if got := kstatusOf(t, c); got != status.InProgressStatus {
		t.Fatalf("a Pending claim is %s, want InProgress", got)
	}
	pv := volumeFor(c, "pvc-c-uid")
	boundClaim(c, pv.Name)
	c.Status = roundTrip(t, claimStatus(c, pv))
	if got := kstatusOf(t, c); got != status.CurrentStatus {
		t.Errorf("a bound claim is %s, want Current: %+v", got, c.Status)
	}
	if c.Spec.VolumeName != "pvc-c-uid" || c.Annotations[annBindCompleted] != "yes" || c.Annotations[annStorageProvisioner] != provisioner {
		t.Errorf("bound claim: volumeName %q, annotations %v", c.Spec.VolumeName, c.Annotations)
	}
	if c.Status.Capacity.Storage().String() != "5Gi" || len(c.Status.AccessModes) != 1 {
		t.Errorf("bound claim's status %+v, want 5Gi ReadWriteOnce", c.Status)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.Name != "uploads" || ref.Namespace != "demo" || ref.UID != "c-uid" ||
		pv.Spec.Capacity.Storage().String() != "5Gi" || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		t.Errorf("volume %+v, want 5Gi, claimed by demo/uploads, deleted with it", pv.Spec)
	}
}

// waitBound waits until claim ns/name exists and is Bound, and returns it.
func waitBound(t *testing.T, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	deadline := time.Now().Add(waitFor)
	for {
		err := memberClient.Get(context.Background(), client.ObjectKeyFromObject(c), c)
		if err == nil && c.Status.Phase == corev1.ClaimBound {
			return c
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("reading claim %s: %v", name, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %s/%s never Bound (err %v): %+v", ns, name, err, c.Status)
		}
		time.Sleep(interval / 2)
	}
}

// waitGone waits until obj is deleted for good.
func waitGone(t *testing.T, obj client.Object) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		err := memberClient.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%T %s never went (err %v); finalizers %v", obj, obj.GetName(), err, obj.GetFinalizers())
		}
		time.Sleep(interval / 2)
	}
}

// volumeOf reads the volume c is bound to and checks it is the one the simulator provisioned for c.
func volumeOf(t *testing.T, c *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	t.Helper()
	pv := &corev1.PersistentVolume{}
	if err := memberClient.Get(context.Background(), types.NamespacedName{Name: c.Spec.VolumeName}, pv); err != nil {
		t.Fatalf("reading the volume of claim %s: %v", c.Name, err)
	}
	if pv.Name != "pvc-"+string(c.UID) || pv.Status.Phase != corev1.VolumeBound || pv.Spec.ClaimRef == nil ||
		pv.Spec.ClaimRef.UID != c.UID || !pv.Spec.Capacity.Storage().Equal(*c.Spec.Resources.Requests.Storage()) {
		t.Errorf("volume of claim %s: %s %s %+v, want pvc-%s, Bound, claimed by it, of its size", c.Name, pv.Name, pv.Status.Phase, pv.Spec, c.UID)
	}
	return pv
}

// A StatefulSet's claims are created per replica and bound, a plain claim is bound, each to a volume
// provisioned for it, and kstatus reads them Current; once bound, a pass writes nothing. A deleted
// claim no pod mounts goes, and so does its volume; one a Deployment's pods mount stays until the
// Deployment goes.
func TestOnAPIServerClaimsAreCreatedAndBound(t *testing.T) {
	s, ns := start(t)
	sts := inNamespace(statefulSetWithClaims(2), ns)
	plain, mounted := claim(ns, "uploads", "5Gi"), claim(ns, "cache", "1Gi")
	d := inNamespace(deployment(1), ns)
	d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "cache"}}}}
	for _, o := range []client.Object{sts, plain, mounted, d} {
		create(t, o)
	}

	var claims []*corev1.PersistentVolumeClaim
	for _, name := range []string{"data-db-0", "data-db-1", "uploads", "cache"} {
		c := waitBound(t, ns, name)
		if got := kstatusOf(t, c); got != status.CurrentStatus {
			t.Errorf("claim %s is Bound but kstatus %s, want Current", name, got)
		}
		volumeOf(t, c)
		claims = append(claims, c)
	}
	if l := claims[0].Labels; l["tier"] != "db" || l["app"] != "web" {
		t.Errorf("StatefulSet claim labels %v, want the template's and the selector's", l)
	}
	waitUntil(t, sts, "Current", is(status.CurrentStatus))

	time.Sleep(time.Second + 5*interval)
	if n, err := s.Sync(context.Background(), cluster); err != nil || n != 0 {
		t.Fatalf("Sync over bound claims wrote %d times (err %v), want 0", n, err)
	}

	// The API server's StorageObjectInUseProtection holds a deleted claim until the simulator, as
	// the protection controller, lets it go: at once for the claim no pod mounts, only once its
	// Deployment is gone for the mounted one. A gone claim's volume is deleted with it.
	if f := claims[2].Finalizers; len(f) != 1 || f[0] != finalizerPVC {
		t.Fatalf("claim finalizers %v, want the API server's %s", f, finalizerPVC)
	}
	plainVolume, mountedVolume := volumeOf(t, claims[2]), volumeOf(t, claims[3])
	for _, c := range []client.Object{claims[2], claims[3]} {
		if err := memberClient.Delete(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	waitGone(t, claims[2])
	waitGone(t, plainVolume)
	for range 3 {
		if _, err := s.Sync(context.Background(), cluster); err != nil {
			t.Fatal(err)
		}
	}
	if err := memberClient.Get(context.Background(), client.ObjectKeyFromObject(claims[3]), claims[3]); err != nil || claims[3].DeletionTimestamp == nil {
		t.Fatalf("the claim a Deployment mounts should be held while it runs: err %v, %+v", err, claims[3].ObjectMeta)
	}
	if err := memberClient.Delete(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	waitGone(t, claims[3])
	waitGone(t, mountedVolume)
}
