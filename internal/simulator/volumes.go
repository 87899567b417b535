package simulator

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// The simulator plays, for claims and volumes, what a cluster's kube-controller-manager and a storage
// provisioner do: the StatefulSet controller creates each replica's claims from its
// volumeClaimTemplates; a provisioner makes a volume for every claim and the persistent-volume
// controller binds the two (a claim stays Pending without them, which kstatus, and so Flux's health
// check, reads as InProgress for good); the protection controllers let a deleted claim go once no
// pod uses it, and a deleted volume once no claim is bound to it; and a provisioned volume whose claim
// is gone is released and deleted (the reclaim policy Delete of a dynamically provisioned volume).
//
// What it leaves out, because no member has nodes or storage classes of its own: every claim is
// bound at once, as by a provisioner of every storage class with Immediate binding (a class that
// waits for its first consumer would bind a claim no pod mounts only when one does), and a claim
// that names no volume gets a new one even where a cluster would match it to an Available volume.

// provisioner names the simulator as the provisioner and CSI driver of the volumes it makes.
const provisioner = "simulator.tidegate.dev"

// The annotations and finalizers the persistent-volume controller, provisioners and the API server's
// StorageObjectInUseProtection admission put on claims and volumes (k8s.io/component-helpers/storage/volume).
const (
	annBindCompleted      = "pv.kubernetes.io/bind-completed"
	annBoundByController  = "pv.kubernetes.io/bound-by-controller"
	annStorageProvisioner = "volume.kubernetes.io/storage-provisioner"
	annBetaProvisioner    = "volume.beta.kubernetes.io/storage-provisioner"
	annProvisionedBy      = "pv.kubernetes.io/provisioned-by"
	finalizerPVC          = "kubernetes.io/pvc-protection"
	finalizerPV           = "kubernetes.io/pv-protection"
)

// volumes creates the claims of sets (the StatefulSets of w's member), binds every Pending claim to a
// volume, and lets deleted claims and released volumes go.
func (s *Simulator) volumes(w *writes, sets []appsv1.StatefulSet) {
	var claims corev1.PersistentVolumeClaimList
	var pvs corev1.PersistentVolumeList
	if !w.list("PersistentVolumeClaims", &claims) || !w.list("PersistentVolumes", &pvs) {
		return
	}
	existing := map[string]bool{}
	for i := range claims.Items {
		existing[objectName(&claims.Items[i])] = true
	}
	for i := range sets {
		for _, c := range setClaims(&sets[i]) {
			if !existing[objectName(c)] && w.record("creating", "PersistentVolumeClaim", c, w.m.client.Create(w.ctx, c)) {
				claims.Items = append(claims.Items, *c)
			}
		}
	}
	volumes := map[string]*corev1.PersistentVolume{}
	for i := range pvs.Items {
		volumes[pvs.Items[i].Name] = &pvs.Items[i]
	}
	// Which claims pods mount is listed only once a deleted claim asks; nil when a list failed, and
	// then no claim is let go.
	var inUse map[string]bool
	listed := false
	for i := range claims.Items {
		c := &claims.Items[i]
		switch {
		case c.DeletionTimestamp != nil:
			if controllerutil.ContainsFinalizer(c, finalizerPVC) {
				if !listed {
					inUse, listed = s.claimsInUse(w, sets), true
				}
				if inUse != nil && !inUse[objectName(c)] {
					removeFinalizer(w, "PersistentVolumeClaim", c, finalizerPVC)
				}
			}
		case c.Status.Phase == "" || c.Status.Phase == corev1.ClaimPending:
			bind(w, c, volumes)
		}
	}
	reclaim(w, &claims, volumes)
}

// setClaims are the claims the StatefulSet controller creates for set, one per volumeClaimTemplate and
// replica, named <template>-<set>-<ordinal> and labelled with the template's labels and the set's
// selector (getPersistentVolumeClaims in pkg/controller/statefulset). They outlive the set, as the
// default persistentVolumeClaimRetentionPolicy (Retain) keeps them; no garbage collector runs on a
// member to act on another policy's owner references, so the simulator sets none.
func setClaims(set *appsv1.StatefulSet) []*corev1.PersistentVolumeClaim {
	if set.DeletionTimestamp != nil {
		return nil
	}
	start := int32(0)
	if set.Spec.Ordinals != nil {
		start = set.Spec.Ordinals.Start
	}
	var out []*corev1.PersistentVolumeClaim
	for _, tpl := range set.Spec.VolumeClaimTemplates {
		for ordinal := start; ordinal < start+replicas(set.Spec.Replicas); ordinal++ {
			c := &corev1.PersistentVolumeClaim{ObjectMeta: *tpl.ObjectMeta.DeepCopy(), Spec: *tpl.Spec.DeepCopy()}
			c.Name = fmt.Sprintf("%s-%s-%d", tpl.Name, set.Name, ordinal)
			c.Namespace = set.Namespace
			c.ResourceVersion, c.UID, c.OwnerReferences = "", "", nil
			if set.Spec.Selector != nil && len(set.Spec.Selector.MatchLabels) > 0 {
				if c.Labels == nil {
					c.Labels = map[string]string{}
				}
				for k, v := range set.Spec.Selector.MatchLabels {
					c.Labels[k] = v
				}
			}
			out = append(out, c)
		}
	}
	return out
}

// bind binds the Pending claim c as a provisioner and the persistent-volume controller would: to the
// volume it names, or to a new one named pvc-<uid>, created in volumes when missing. A claim naming a
// volume bound to another claim stays Pending, as it would in a cluster. Each step is written once;
// one that fails is done again by the next pass.
func bind(w *writes, c *corev1.PersistentVolumeClaim, volumes map[string]*corev1.PersistentVolume) {
	name := c.Spec.VolumeName
	if name == "" {
		name = "pvc-" + string(c.UID)
	}
	pv := volumes[name]
	if pv == nil {
		pv = volumeFor(c, name)
		if !w.record("provisioning", "PersistentVolume", pv, w.m.client.Create(w.ctx, pv)) {
			return
		}
		volumes[name] = pv
	}
	if ref := pv.Spec.ClaimRef; ref == nil {
		// A volume made by hand that the claim names: the persistent-volume controller claims it.
		before := pv.DeepCopy()
		pv.Spec.ClaimRef = claimRef(c)
		if !w.record("claiming", "PersistentVolume", pv, w.m.client.Patch(w.ctx, pv, client.MergeFrom(before))) {
			return
		}
	} else if ref.Namespace != c.Namespace || ref.Name != c.Name || (ref.UID != "" && ref.UID != c.UID) {
		return
	}
	if pv.Status.Phase != corev1.VolumeBound {
		pv.Status.Phase = corev1.VolumeBound
		if !w.record("writing the status of", "PersistentVolume", pv, w.m.client.Status().Update(w.ctx, pv)) {
			return
		}
	}
	before := c.DeepCopy()
	boundClaim(c, name)
	if !equality.Semantic.DeepEqual(before.ObjectMeta, c.ObjectMeta) || before.Spec.VolumeName != c.Spec.VolumeName {
		if !w.record("binding", "PersistentVolumeClaim", c, w.m.client.Patch(w.ctx, c, client.MergeFrom(before))) {
			return
		}
	}
	c.Status = claimStatus(c, pv)
	w.status("PersistentVolumeClaim", c, true)
}

// volumeFor is the volume a provisioner makes for claim c: its size, access and volume modes and
// storage class, bound to it, deleted once it is.
func volumeFor(c *corev1.PersistentVolumeClaim, name string) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: c.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   c.Spec.AccessModes,
			ClaimRef:                      claimRef(c),
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              deref(c.Spec.StorageClassName, ""),
			VolumeMode:                    c.Spec.VolumeMode,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				CSI: &corev1.CSIPersistentVolumeSource{Driver: provisioner, VolumeHandle: name},
			},
		},
	}
	pv.Name = name
	pv.Annotations = map[string]string{annProvisionedBy: provisioner}
	return pv
}

func claimRef(c *corev1.PersistentVolumeClaim) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "PersistentVolumeClaim", Namespace: c.Namespace, Name: c.Name, UID: c.UID}
}

// boundClaim gives claim c what the persistent-volume controller writes to a claim it binds to the
// volume volume: spec.volumeName and the annotations saying who provisioned and bound it.
func boundClaim(c *corev1.PersistentVolumeClaim, volume string) {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	if c.Spec.VolumeName == "" {
		c.Spec.VolumeName = volume
		c.Annotations[annBoundByController] = "yes"
		c.Annotations[annStorageProvisioner] = provisioner
		c.Annotations[annBetaProvisioner] = provisioner
	}
	c.Annotations[annBindCompleted] = "yes"
}

// claimStatus is the status of claim c bound to pv: Bound, with the volume's access modes and capacity.
func claimStatus(c *corev1.PersistentVolumeClaim, pv *corev1.PersistentVolume) corev1.PersistentVolumeClaimStatus {
	st := *c.Status.DeepCopy()
	st.Phase = corev1.ClaimBound
	st.AccessModes = pv.Spec.AccessModes
	st.Capacity = pv.Spec.Capacity.DeepCopy()
	return st
}

// reclaim releases and deletes each volume the simulator provisioned whose claim is gone, lets each
// deleted volume no claim is bound to go, and makes the other unclaimed new volumes Available.
func reclaim(w *writes, claims *corev1.PersistentVolumeClaimList, volumes map[string]*corev1.PersistentVolume) {
	uids := map[string]string{}
	for i := range claims.Items {
		uids[objectName(&claims.Items[i])] = string(claims.Items[i].UID)
	}
	for _, pv := range volumes {
		ref := pv.Spec.ClaimRef
		claimGone := ref != nil && ref.UID != "" && uids[ref.Namespace+"/"+ref.Name] != string(ref.UID)
		switch {
		case pv.DeletionTimestamp != nil:
			if pv.Status.Phase != corev1.VolumeBound && controllerutil.ContainsFinalizer(pv, finalizerPV) {
				removeFinalizer(w, "PersistentVolume", pv, finalizerPV)
			}
		case claimGone && pv.Status.Phase == corev1.VolumeBound:
			pv.Status.Phase = corev1.VolumeReleased
			w.status("PersistentVolume", pv, true)
		case claimGone && pv.Annotations[annProvisionedBy] == provisioner &&
			pv.Spec.PersistentVolumeReclaimPolicy == corev1.PersistentVolumeReclaimDelete:
			w.record("deleting", "PersistentVolume", pv, w.m.client.Delete(w.ctx, pv))
		case ref == nil && (pv.Status.Phase == "" || pv.Status.Phase == corev1.VolumePending):
			pv.Status.Phase = corev1.VolumeAvailable
			w.status("PersistentVolume", pv, true)
		}
	}
}

// removeFinalizer takes finalizer off obj, as the protection controller that owns it does once
// nothing uses obj; the patch holds obj's resourceVersion, so a change since it was read is read
// again by the next pass rather than overwritten.
func removeFinalizer(w *writes, kind string, obj client.Object, finalizer string) {
	before := obj.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(obj, finalizer)
	patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	w.record("releasing", kind, obj, w.m.client.Patch(w.ctx, obj, patch))
}

// claimsInUse lists namespace/name of every claim a pod of the simulated cluster mounts: each
// replica's claims of sets, and the claims named in the pod templates of the workloads that run pods
// and of unfinished Jobs; nil when it could not list them all.
func (s *Simulator) claimsInUse(w *writes, sets []appsv1.StatefulSet) map[string]bool {
	inUse := map[string]bool{}
	mounts := func(ns string, spec corev1.PodSpec) {
		for _, v := range spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				inUse[ns+"/"+v.PersistentVolumeClaim.ClaimName] = true
			}
		}
	}
	for i := range sets {
		for _, c := range setClaims(&sets[i]) {
			inUse[objectName(c)] = true
		}
		if sets[i].DeletionTimestamp == nil && replicas(sets[i].Spec.Replicas) > 0 {
			mounts(sets[i].Namespace, sets[i].Spec.Template.Spec)
		}
	}
	var deps appsv1.DeploymentList
	var dss appsv1.DaemonSetList
	var jobs batchv1.JobList
	if !w.list("Deployments", &deps) || !w.list("DaemonSets", &dss) || !w.list("Jobs", &jobs) {
		return nil
	}
	for _, d := range deps.Items {
		if d.DeletionTimestamp == nil && replicas(d.Spec.Replicas) > 0 {
			mounts(d.Namespace, d.Spec.Template.Spec)
		}
	}
	for _, d := range dss.Items {
		if d.DeletionTimestamp == nil {
			mounts(d.Namespace, d.Spec.Template.Spec)
		}
	}
	for i := range jobs.Items {
		if j := &jobs.Items[i]; j.DeletionTimestamp == nil && runsHere(j) && !jobFinished(j) {
			mounts(j.Namespace, j.Spec.Template.Spec)
		}
	}
	return inUse
}
