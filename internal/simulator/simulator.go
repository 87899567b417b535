package simulator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Options tunes a Simulator.
type Options struct {
	// Interval between two passes over a member cluster. Defaults to 300ms: quick enough that a healthy
	// workload looks promptly healthy to a kustomize-controller health check, cheap for a few clusters.
	Interval time.Duration
	// Nodes is how many nodes each member cluster pretends to have: the number of pods a DaemonSet runs.
	// Defaults to 1.
	Nodes int
	// PassTimeout bounds one pass over a member cluster in the background loop, so that a request
	// stuck on a stalled API server (a dead connection client-go notices only after its health
	// ping) cannot stop that cluster's workloads from moving. Defaults to 10s.
	PassTimeout time.Duration
	// RequestsPerSecond is how many requests of simulated traffic (MetricsHandler) each available pod
	// answers per second. Defaults to DefaultRequestsPerSecond.
	RequestsPerSecond float64
}

// Simulator moves the status of Deployments, StatefulSets, DaemonSets, Jobs, CronJobs and
// HorizontalPodAutoscalers in a set of member clusters, and binds their PersistentVolumeClaims, the way
// kube-controller-manager, kubelets and a storage provisioner would, with faults injected per cluster.
// It is safe for concurrent use: tests change faults while it runs.
type Simulator struct {
	opts    Options
	members map[string]*member

	mu     sync.Mutex
	faults map[string]map[string]activeFault // cluster → Fault.Workload → fault
	cancel context.CancelFunc
	done   sync.WaitGroup

	// traffic is the workloads' simulated service traffic, which registry exports (MetricsHandler).
	traffic  *traffic
	registry *prometheus.Registry
}

// member is one cluster's worker state. Its lock makes a pass exclusive, so Sync from a test and the
// background loop never interleave their bookkeeping.
type member struct {
	name   string
	client client.Client

	mu      sync.Mutex
	tracked map[string]*tracked // kind/namespace/name → what its status cannot carry
	lastErr string
}

// New returns a Simulator for members (cluster name → admin client of its API server). It does nothing
// until Start or Sync.
func New(members map[string]client.Client, opts Options) *Simulator {
	if opts.Interval <= 0 {
		opts.Interval = 300 * time.Millisecond
	}
	if opts.Nodes <= 0 {
		opts.Nodes = 1
	}
	if opts.PassTimeout <= 0 {
		opts.PassTimeout = 10 * time.Second
	}
	if opts.RequestsPerSecond <= 0 {
		opts.RequestsPerSecond = DefaultRequestsPerSecond
	}
	s := &Simulator{opts: opts, members: map[string]*member{}, faults: map[string]map[string]activeFault{},
		traffic: &traffic{rps: opts.RequestsPerSecond, flows: map[string]map[string]*flow{}}, registry: prometheus.NewRegistry()}
	s.registry.MustRegister(newTrafficCollector(s.traffic))
	for name, c := range members {
		s.members[name] = &member{name: name, client: c, tracked: map[string]*tracked{}}
	}
	return s
}

// Clusters returns the names of the member clusters, sorted.
func (s *Simulator) Clusters() []string {
	names := make([]string, 0, len(s.members))
	for n := range s.members {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Start runs one goroutine per member cluster, each making a pass every Interval until ctx ends or Stop
// is called. The logger is taken from ctx. Calling Start again, while running or after Stop, does nothing:
// a Simulator runs once.
func (s *Simulator) Start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return
	}
	ctx, s.cancel = context.WithCancel(ctx)
	for _, m := range s.members {
		s.done.Add(1)
		go func() {
			defer s.done.Done()
			s.run(ctx, m)
		}()
	}
}

// Stop stops the goroutines started by Start and waits for them. Safe to call twice or without Start.
func (s *Simulator) Stop() {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.done.Wait()
}

func (s *Simulator) run(ctx context.Context, m *member) {
	logger := log.FromContext(ctx).WithValues("cluster", m.name)
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		passCtx, cancel := context.WithTimeout(ctx, s.opts.PassTimeout)
		_, err := s.pass(passCtx, m)
		cancel()
		// A cluster that stays broken (an unreachable member, a stopped API server) would otherwise log the
		// same error every Interval; log only when the error changes.
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if msg != m.lastErr && ctx.Err() == nil {
			if err != nil {
				logger.Error(err, "simulating workload status")
			} else {
				logger.Info("simulating workload status again")
			}
			m.lastErr = msg
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sync makes one pass over cluster now and returns how many writes it made: statuses, and the claims,
// volumes and scales it created or changed. Tests use it to reach a state without waiting for the
// loop, and to show that a pass over unchanged objects writes nothing.
func (s *Simulator) Sync(ctx context.Context, cluster string) (int, error) {
	m, ok := s.members[cluster]
	if !ok {
		return 0, fmt.Errorf("simulator has no member cluster %q (known: %v)", cluster, s.Clusters())
	}
	return s.pass(ctx, m)
}

// pass makes one pass over m: it moves the status of every workload, Job, CronJob, claim and autoscaler
// the way a cluster would now, creates what the cluster's controllers would (a StatefulSet's claims,
// the volumes bound to claims) and writes only what differs from what the API server holds.
// Conflicts and deleted objects are left to the next pass, which reads them anew. The autoscalers go
// first, so that a workload they scale gets its status in the same pass.
func (s *Simulator) pass(ctx context.Context, m *member) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	seen := map[string]bool{}
	w := &writes{ctx: ctx, m: m}
	s.autoscalers(w, now)
	s.deployments(w, seen, now)
	sets := s.statefulSets(w, seen, now)
	s.daemonSets(w, seen, now)
	jobs := s.jobs(w, seen, now)
	s.cronJobs(w, jobs)
	s.volumes(w, sets)

	// Forget what was deleted, unless a list failed: then absence says nothing.
	if len(w.errs) == 0 {
		for k := range m.tracked {
			if !seen[k] {
				delete(m.tracked, k)
			}
		}
		s.traffic.forget(m.name, seen)
	}
	return w.n, errors.Join(w.errs...)
}

// writes carries one pass's writes to a member: how many were made, and the errors to report.
type writes struct {
	ctx  context.Context
	m    *member
	n    int
	errs []error
}

// status writes obj's status, when it changed.
func (w *writes) status(kind string, obj client.Object, changed bool) {
	if changed {
		w.record("writing the status of", kind, obj, w.m.client.Status().Update(w.ctx, obj))
	}
}

// record counts a write that was made and says so. A conflict, an object gone or one already there
// is left to the next pass, which reads them anew; any other error is kept for the pass to return.
func (w *writes) record(action, kind string, obj client.Object, err error) bool {
	switch {
	case err == nil:
		w.n++
		log.FromContext(w.ctx).V(1).Info("simulated a write", "action", action, "cluster", w.m.name, "kind", kind,
			"namespace", obj.GetNamespace(), "name", obj.GetName(), "generation", obj.GetGeneration())
		return true
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err):
	default:
		w.errs = append(w.errs, fmt.Errorf("%s %s %s on cluster %s: %w", action, kind, objectName(obj), w.m.name, err))
	}
	return false
}

// list lists what of kind the cluster holds into list, keeping the error; it says whether it could.
func (w *writes) list(kind string, list client.ObjectList) bool {
	if err := w.m.client.List(w.ctx, list); err != nil {
		w.errs = append(w.errs, fmt.Errorf("listing %s on cluster %s: %w", kind, w.m.name, err))
		return false
	}
	return true
}

// objectName is namespace/name, or name alone for a cluster-scoped object.
func objectName(obj client.Object) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

// deployments moves the status of the Deployments of w's member as the deployment controller and
// kubelets would.
func (s *Simulator) deployments(w *writes, seen map[string]bool, now time.Time) {
	var deps appsv1.DeploymentList
	w.list("Deployments", &deps)
	for i := range deps.Items {
		d := &deps.Items[i]
		if d.DeletionTimestamp != nil {
			continue
		}
		t := w.m.track("Deployment", d, seen, now, deploymentRolledOut(d))
		f := s.faultFor(w.m.name, d.Namespace, d.Name, images(d.Spec.Template.Spec)...)
		st := deploymentStatus(d, t.assess(f, replicas(d.Spec.Replicas), progressDeadline(d), now), now)
		s.traffic.observe(w.m.name, t.key, d.Namespace, d.Name, st.AvailableReplicas, f, now)
		changed := !equality.Semantic.DeepEqual(d.Status, st)
		d.Status = st
		w.status("Deployment", d, changed)
	}
}

// statefulSets moves the status of the StatefulSets of w's member as the StatefulSet controller and
// kubelets would, and returns them for their claims.
func (s *Simulator) statefulSets(w *writes, seen map[string]bool, now time.Time) []appsv1.StatefulSet {
	var sts appsv1.StatefulSetList
	w.list("StatefulSets", &sts)
	for i := range sts.Items {
		o := &sts.Items[i]
		if o.DeletionTimestamp != nil {
			continue
		}
		t := w.m.track("StatefulSet", o, seen, now, statefulSetRolledOut(o))
		f := s.faultFor(w.m.name, o.Namespace, o.Name, images(o.Spec.Template.Spec)...)
		st := statefulSetStatus(o, t.assess(f, replicas(o.Spec.Replicas), 0, now))
		s.traffic.observe(w.m.name, t.key, o.Namespace, o.Name, st.AvailableReplicas, f, now)
		changed := !equality.Semantic.DeepEqual(o.Status, st)
		o.Status = st
		w.status("StatefulSet", o, changed)
	}
	return sts.Items
}

// daemonSets moves the status of the DaemonSets of w's member as the DaemonSet controller and kubelets
// would, on Options.Nodes nodes.
func (s *Simulator) daemonSets(w *writes, seen map[string]bool, now time.Time) {
	nodes := int32(s.opts.Nodes)
	var dss appsv1.DaemonSetList
	w.list("DaemonSets", &dss)
	for i := range dss.Items {
		o := &dss.Items[i]
		if o.DeletionTimestamp != nil {
			continue
		}
		t := w.m.track("DaemonSet", o, seen, now, daemonSetRolledOut(o, nodes))
		f := s.faultFor(w.m.name, o.Namespace, o.Name, images(o.Spec.Template.Spec)...)
		st := daemonSetStatus(o, nodes, t.assess(f, nodes, 0, now))
		s.traffic.observe(w.m.name, t.key, o.Namespace, o.Name, st.NumberAvailable, f, now)
		changed := !equality.Semantic.DeepEqual(o.Status, st)
		o.Status = st
		w.status("DaemonSet", o, changed)
	}
}

// track returns the record of obj, starting a new one when obj is new, was recreated (new UID) or has a
// new generation. A new record of a generation whose status already shows it rolled out (a simulator
// started next to a healthy cluster) counts as rolled out now, so Slow does not replay an old rollout.
func (m *member) track(kind string, obj client.Object, seen map[string]bool, now time.Time, rolledOut bool) *tracked {
	key := kind + "/" + obj.GetNamespace() + "/" + obj.GetName()
	seen[key] = true
	t := m.tracked[key]
	if t == nil || t.uid != string(obj.GetUID()) || t.generation != obj.GetGeneration() {
		t = &tracked{key: key, uid: string(obj.GetUID()), generation: obj.GetGeneration(), firstSeen: now}
		if rolledOut {
			t.rolledOutAt = now
		}
		m.tracked[key] = t
	}
	return t
}

// images lists the container images of a pod template, for faults limited to one image.
func images(spec corev1.PodSpec) []string {
	out := make([]string, 0, len(spec.Containers))
	for _, c := range spec.Containers {
		out = append(out, c.Image)
	}
	return out
}
