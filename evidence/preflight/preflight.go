package preflight

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/verdict"
)

const (
	// FieldOwner is the field manager of the dry-run apply: kustomize-controller's, so that the
	// server judges field ownership as it will when kustomize-controller applies.
	FieldOwner = "kustomize-controller"

	// DefaultTimeout bounds the check of one cluster.
	DefaultTimeout = 20 * time.Second
	// DefaultMaxErrors bounds each list of a cluster's result.
	DefaultMaxErrors = 50
	// DefaultParallel is how many clusters CheckAll checks at once: each check is a handful of
	// requests to one member API server (discovery, then a dry-run per object, a few at a time), and
	// members answer at their own pace.
	DefaultParallel = 50

	// dryRunWorkers is how many dry-runs one cluster's check has in flight at once.
	dryRunWorkers = 4
	// grace is how long Check waits, after its time is up, for the check to wind down on its own
	// (requests in flight are cancelled) before it gives up on it.
	grace = 2 * time.Second
	// maxMessage bounds one error message, in bytes.
	maxMessage = 1024
)

// Options bound a check.
type Options struct {
	// Timeout bounds the whole check of one cluster (DefaultTimeout when 0). Check returns at most a
	// couple of seconds after it, whatever the cluster does.
	Timeout time.Duration
	// MaxErrors bounds MissingAPIs and DryRunErrors (DefaultMaxErrors when 0): the first MaxErrors
	// entries, then "... and N more".
	MaxErrors int
	// Force is the Kustomization's spec.force: kustomize-controller deletes and recreates an object
	// the server refuses to update (an immutable field changed). Then such a refusal is not an error
	// when the object passes a dry-run create as a new object; the recreate itself is rollbackSafe's
	// business.
	Force bool
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxErrors <= 0 {
		o.MaxErrors = DefaultMaxErrors
	}
	return o
}

// Target is one cluster to check.
type Target struct {
	Name string
	// Config reaches the cluster's API server, built from its kubeconfig. nil when the caller could
	// not build it (the cluster is then unreachable, and Err says why), or when Resolve builds it.
	Config *rest.Config
	// Resolve, when Config is nil, builds the config within the cluster's own deadline, in its turn
	// (reading a kubeconfig Secret is part of reaching the cluster). Its errors, like Err, must hold
	// no credential.
	Resolve func(ctx context.Context) (*rest.Config, error)
	// Err is why there is no Config (the FleetCluster is gone, its kubeconfig Secret is missing or
	// unusable). Its message must hold no credential.
	Err error
	// Objects, when not nil, gives the objects to check on this target in place of those CheckAll
	// is given: the package substituted with the cluster's own install-time values. It is called
	// when the target's turn comes, so that at most parallel targets' objects are held at once.
	Objects func() ([]*unstructured.Unstructured, error)
}

// CheckAll checks every target with Check, at most parallel at once (DefaultParallel when
// parallel <= 0), for objs or the target's own Objects, and returns their results in the order of
// targets. A target without a Config or a Resolve is unreachable; one whose Objects fails has the
// error among its dry-run errors.
//
// Each target has its own deadline: opts.Timeout, shortened when ctx has a deadline so that every
// round of parallel checks fits in the time ctx has left (evidence.MemberDeadline). A cluster that is
// slow or does not answer fails its own check when its deadline passes, and the others go on; the
// collection as a whole ends with ctx. A target whose turn did not come before ctx ended is
// unreachable ("not checked: ..."): it fails closed.
func CheckAll(ctx context.Context, targets []Target, objs []*unstructured.Unstructured, opts Options, parallel int) []verdict.ClusterPreflight {
	if parallel <= 0 {
		parallel = DefaultParallel
	}
	opts = opts.withDefaults()
	results := make([]verdict.ClusterPreflight, len(targets))
	var reach []int // the targets to check
	for i, t := range targets {
		if t.Config == nil && t.Resolve == nil {
			results[i] = verdict.ClusterPreflight{Name: t.Name, Unreachable: "no client for the cluster"}
			if t.Err != nil {
				results[i].Unreachable = t.Err.Error()
			}
			continue
		}
		reach = append(reach, i)
	}
	if dl, ok := ctx.Deadline(); ok {
		opts.Timeout = evidence.MemberDeadline(len(reach), parallel, time.Until(dl), opts.Timeout)
	}
	evidence.Each(len(reach), parallel, func(k int) {
		i := reach[k]
		results[i] = checkTarget(ctx, targets[i], objs, opts)
	})
	return results
}

// checkTarget checks one target within opts.Timeout: the time to build its config (Resolve) and
// the check share it.
func checkTarget(ctx context.Context, t Target, objs []*unstructured.Unstructured, opts Options) verdict.ClusterPreflight {
	if err := ctx.Err(); err != nil {
		return verdict.ClusterPreflight{Name: t.Name, Unreachable: "not checked: the gate's time ran out before this cluster's turn: " + err.Error()}
	}
	mctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	cfg := t.Config
	if cfg == nil {
		var err error
		if cfg, err = t.Resolve(mctx); err != nil {
			return verdict.ClusterPreflight{Name: t.Name, Unreachable: err.Error()}
		}
		if cfg == nil {
			return verdict.ClusterPreflight{Name: t.Name, Unreachable: "no client for the cluster"}
		}
	}
	return checkObjects(mctx, t, cfg, objs, opts)
}

// Check runs the preflight of cluster name, whose API server cfg reaches, for objs (already
// substituted), within opts.Timeout and ctx:
//
//   - Reachable and ServerVersion: the API server's version (discovery). When the server does not
//     answer (or refuses the credentials) the cluster is unreachable and nothing else is filled.
//   - MissingAPIs: the group/version/kinds of objs the cluster does not serve, with the objects
//     that need them, as "example.com/v1, Kind=Widget: Widget demo/a, Widget demo/b" ("v1,
//     Kind=Foo: ..." for the core group; at most 3 objects and "and N more"), sorted, except kinds
//     whose CustomResourceDefinition is among objs.
//   - DryRunErrors: the server's answer to a server-side dry-run apply of every object whose API it
//     serves, as "<kind> <namespace>/<name>: <message>" ("<kind> <name>: <message>" for a
//     cluster-scoped object), in the order of objs. Objects of kinds defined by
//     CustomResourceDefinitions among objs are not dry-run; a namespaced object whose namespace is
//     missing on the cluster but among objs is not an error. An object that could not be dry-run
//     (its API could not be discovered, the time ran out) is an error.
//
// Both lists hold at most opts.MaxErrors entries and then "... and N more". Messages are the
// server's and client-go's, on one line, with credentials taken out; objs are not modified.
//
// The check ends when opts.Timeout or ctx runs out: the requests in flight are cancelled and the
// objects not dry-run by then are errors. Should the check not end even so (a credential plugin
// that hangs, say), Check gives up on it two seconds later and its DryRunErrors is the one entry
// "the preflight did not finish within <timeout>: <ctx error>".
func Check(ctx context.Context, name string, cfg *rest.Config, objs []*unstructured.Unstructured, opts Options) verdict.ClusterPreflight {
	if cfg == nil {
		return verdict.ClusterPreflight{Name: name, Unreachable: "no client for the cluster"}
	}
	opts = opts.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()

	c := &check{name: name, cfg: cfg, objs: objs, opts: opts, redact: newRedactor(cfg)}
	done := make(chan verdict.ClusterPreflight, 1)
	go func() { done <- c.run(ctx) }()
	select {
	case r := <-done:
		return r
	case <-ctx.Done():
	}
	// Requests in flight are cancelled; what does not heed ctx (an exec credential plugin, say) is
	// given up on after a grace period.
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case r := <-done:
		return r
	case <-t.C:
		return c.abandoned(ctx.Err())
	}
}

type check struct {
	name   string
	cfg    *rest.Config
	objs   []*unstructured.Unstructured
	opts   Options
	redact *redactor

	mu      sync.Mutex
	version string // set once the server answered
}

// abandoned is the result of a check that did not end in time.
func (c *check) abandoned(err error) verdict.ClusterPreflight {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.version == "" {
		return verdict.ClusterPreflight{Name: c.name, Unreachable: fmt.Sprintf("the API server did not answer within %s: %v", c.opts.Timeout, err)}
	}
	return verdict.ClusterPreflight{Name: c.name, Reachable: true, ServerVersion: c.version,
		DryRunErrors: []string{fmt.Sprintf("the preflight did not finish within %s: %v", c.opts.Timeout, err)}}
}

// served is what discovery says about one group/version/kind.
type served struct {
	ok         bool   // the cluster serves it
	namespaced bool   // valid when ok
	resource   string // plural resource name, valid when ok
	singular   string
	err        error // discovery of its group/version failed (other than not served)
}

func (c *check) run(ctx context.Context) verdict.ClusterPreflight {
	res := verdict.ClusterPreflight{Name: c.name}
	cfg := rest.CopyConfig(c.cfg)
	if cfg.Timeout <= 0 || cfg.Timeout > c.opts.Timeout {
		cfg.Timeout = c.opts.Timeout
	}
	if cfg.QPS == 0 {
		cfg.QPS = 50
	}
	if cfg.Burst == 0 {
		cfg.Burst = 100
	}
	cfg.WarningHandler = rest.NoWarnings{}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		res.Unreachable = c.redact.clean("building an HTTP client: " + err.Error())
		return res
	}
	defer httpClient.CloseIdleConnections()
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		res.Unreachable = c.redact.clean("building a discovery client: " + err.Error())
		return res
	}
	v, err := dc.ServerVersionWithContext(ctx)
	if err != nil {
		res.Unreachable = c.redact.clean("asking the server version: " + err.Error())
		return res
	}
	res.Reachable, res.ServerVersion = true, v.GitVersion
	c.mu.Lock()
	c.version = v.GitVersion
	c.mu.Unlock()

	errs := make([][]string, len(c.objs)) // per object, in the order of objs
	gvks := make([]schema.GroupVersionKind, len(c.objs))
	for i, o := range c.objs {
		if o == nil {
			errs[i] = []string{"nil object"}
			continue
		}
		gv, err := schema.ParseGroupVersion(o.GetAPIVersion())
		if err != nil || o.GetAPIVersion() == "" || o.GetKind() == "" {
			errs[i] = []string{c.ref(o, o.GetNamespace() != "") + ": invalid apiVersion or kind"}
			continue
		}
		gvks[i] = gv.WithKind(o.GetKind())
	}

	// Discovery: which of the objects' kinds the cluster serves, and how.
	kinds := map[schema.GroupVersionKind]*served{}
	lists := map[schema.GroupVersion]*metav1.APIResourceList{}
	listErrs := map[schema.GroupVersion]error{}
	for i, gvk := range gvks {
		if errs[i] != nil || kinds[gvk] != nil {
			continue
		}
		gv := gvk.GroupVersion()
		list, listed := lists[gv]
		lerr, failed := listErrs[gv]
		if !listed && !failed {
			list, lerr = dc.ServerResourcesForGroupVersionWithContext(ctx, gv.String())
			if lerr != nil {
				list = nil
				if apierrors.IsNotFound(lerr) {
					lerr = nil // the group/version is not served
				}
			}
			lists[gv], listErrs[gv] = list, lerr
		}
		s := &served{err: lerr}
		if list != nil {
			for _, r := range list.APIResources {
				if r.Kind == gvk.Kind && !strings.Contains(r.Name, "/") {
					s.ok, s.namespaced, s.resource, s.singular = true, r.Namespaced, r.Name, r.SingularName
					break
				}
			}
		}
		kinds[gvk] = s
	}

	defined := crdKinds(c.objs)
	namespaces := map[string]bool{}
	for i, o := range c.objs {
		if errs[i] == nil && gvks[i].Group == "" && gvks[i].Kind == "Namespace" {
			namespaces[o.GetName()] = true
		}
	}

	var missingOrder []schema.GroupVersionKind
	seenMissing := map[schema.GroupVersionKind]bool{}
	neededBy := map[schema.GroupVersionKind][]string{}
	mapper := meta.NewDefaultRESTMapper(nil)
	var dryRun []int
	for i, o := range c.objs {
		if errs[i] != nil {
			continue
		}
		gvk := gvks[i]
		s := kinds[gvk]
		switch {
		case defined[gvk]:
			// Its API will exist once its CustomResourceDefinition is applied; it cannot be dry-run
			// before.
		case s.err != nil:
			errs[i] = []string{c.ref(o, o.GetNamespace() != "") + ": discovering " + gvk.GroupVersion().String() + ": " + c.redact.clean(s.err.Error())}
		case !s.ok:
			if !seenMissing[gvk] {
				seenMissing[gvk] = true
				missingOrder = append(missingOrder, gvk)
			}
			neededBy[gvk] = append(neededBy[gvk], c.ref(o, o.GetNamespace() != ""))
		default:
			scope := meta.RESTScopeRoot
			if s.namespaced {
				scope = meta.RESTScopeNamespace
			}
			singular := s.singular
			if singular == "" {
				singular = strings.ToLower(gvk.Kind)
			}
			mapper.AddSpecific(gvk, gvk.GroupVersion().WithResource(s.resource), gvk.GroupVersion().WithResource(singular), scope)
			dryRun = append(dryRun, i)
		}
	}
	var missing []string
	for _, gvk := range missingOrder {
		missing = append(missing, missingAPI(gvk, neededBy[gvk]))
	}
	sort.Strings(missing)
	res.MissingAPIs = c.capped(missing)

	if len(dryRun) > 0 {
		cl, err := client.New(cfg, client.Options{HTTPClient: httpClient, Mapper: mapper})
		if err != nil {
			for _, i := range dryRun {
				errs[i] = []string{c.ref(c.objs[i], kinds[gvks[i]].namespaced) + ": " + c.redact.clean(err.Error())}
			}
		} else {
			c.dryRunAll(ctx, cl, dryRun, kinds, gvks, namespaces, errs)
		}
	}

	var all []string
	for _, e := range errs {
		all = append(all, e...)
	}
	res.DryRunErrors = c.capped(all)
	return res
}

// dryRunAll dry-runs the objects at the indexes of todo, a few at a time, and records their errors
// in errs.
func (c *check) dryRunAll(ctx context.Context, cl client.Client, todo []int, kinds map[schema.GroupVersionKind]*served,
	gvks []schema.GroupVersionKind, namespaces map[string]bool, errs [][]string) {
	evidence.Each(len(todo), dryRunWorkers, func(k int) {
		i := todo[k]
		o, s := c.objs[i], kinds[gvks[i]]
		if err := ctx.Err(); err != nil {
			errs[i] = []string{c.ref(o, s.namespaced) + ": not dry-run: " + err.Error()}
			return
		}
		if msg := c.dryRun(ctx, cl, o, s.namespaced, namespaces); msg != "" {
			errs[i] = []string{c.ref(o, s.namespaced) + ": " + msg}
		}
	})
}

// dryRun dry-runs o and returns the server's objection, "" when there is none.
func (c *check) dryRun(ctx context.Context, cl client.Client, o *unstructured.Unstructured, namespaced bool, namespaces map[string]bool) string {
	obj := o.DeepCopy()
	if !namespaced {
		// kustomize-controller applies cluster-scoped objects without a namespace.
		obj.SetNamespace("")
	}
	err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj),
		client.DryRunAll, client.ForceOwnership, client.FieldOwner(FieldOwner))
	if err == nil {
		return ""
	}
	ns := o.GetNamespace()
	if namespaced && ns != "" && namespaces[ns] && isNamespaceNotFound(err, ns) {
		// Its namespace is among the objects: it will exist by the time the object is applied.
		return ""
	}
	if c.opts.Force && isImmutableError(err) {
		// kustomize-controller would recreate it: check that it is acceptable as a new object.
		fresh := obj.DeepCopy()
		fresh.SetGenerateName(fresh.GetName() + "-")
		fresh.SetName("")
		fresh.SetResourceVersion("")
		cerr := cl.Create(ctx, fresh, client.DryRunAll, client.FieldOwner(FieldOwner))
		if cerr == nil {
			return ""
		}
		err = fmt.Errorf("the server refuses the update and a recreate (spec.force) would fail too: %w", cerr)
	}
	msg := c.redact.clean(err.Error())
	if namespaced && ns == "" && apierrors.IsNotFound(err) {
		msg = "namespace not specified: " + msg
	}
	return msg
}

// isNamespaceNotFound says whether err is the server's "namespaces "ns" not found".
func isNamespaceNotFound(err error, ns string) bool {
	if !apierrors.IsNotFound(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Group == "" && d.Kind == "namespaces" && d.Name == ns
}

// ref names o as "<kind> <namespace>/<name>", or "<kind> <name>" when it is cluster-scoped.
func (c *check) ref(o *unstructured.Unstructured, namespaced bool) string {
	kind := o.GetKind()
	if kind == "" {
		kind = "<no kind>"
	}
	if namespaced {
		return kind + " " + o.GetNamespace() + "/" + o.GetName()
	}
	return kind + " " + o.GetName()
}

// capped keeps the first MaxErrors entries of l and says how many it left out.
func (c *check) capped(l []string) []string {
	if len(l) <= c.opts.MaxErrors {
		return l
	}
	return append(l[:c.opts.MaxErrors:c.opts.MaxErrors], fmt.Sprintf("... and %d more", len(l)-c.opts.MaxErrors))
}

// crdKinds returns the group/version/kinds that the CustomResourceDefinitions among objs serve.
func crdKinds(objs []*unstructured.Unstructured) map[schema.GroupVersionKind]bool {
	kinds := map[schema.GroupVersionKind]bool{}
	for _, o := range objs {
		if o == nil || o.GetKind() != "CustomResourceDefinition" || !strings.HasPrefix(o.GetAPIVersion(), "apiextensions.k8s.io/") {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		if group == "" || kind == "" {
			continue
		}
		if v, ok, _ := unstructured.NestedString(o.Object, "spec", "version"); ok && v != "" { // v1beta1
			kinds[schema.GroupVersionKind{Group: group, Version: v, Kind: kind}] = true
		}
		versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
		for _, v := range versions {
			m, ok := v.(map[string]any)
			if !ok {
				continue
			}
			name, _ := m["name"].(string)
			if servedV, ok := m["served"].(bool); name == "" || (ok && !servedV) {
				continue
			}
			kinds[schema.GroupVersionKind{Group: group, Version: name, Kind: kind}] = true
		}
	}
	return kinds
}

// maxNeededBy is how many objects a missing API entry names.
const maxNeededBy = 3

// missingAPI says which API is missing and which objects need it.
func missingAPI(gvk schema.GroupVersionKind, refs []string) string {
	s := gvk.GroupVersion().String() + ", Kind=" + gvk.Kind + ": "
	if len(refs) > maxNeededBy {
		return s + strings.Join(refs[:maxNeededBy], ", ") + fmt.Sprintf(" and %d more", len(refs)-maxNeededBy)
	}
	return s + strings.Join(refs, ", ")
}

// immutableField matches the messages of immutable-field refusals from admission webhooks and CEL.
var immutableField = regexp.MustCompile(`is\simmutable|immutable\sfield`)

// isImmutableError tells a refused update that kustomize-controller meets with a recreate when
// spec.force is set: the same test as fluxcd/pkg/ssa's IsImmutableError.
func isImmutableError(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsInvalid(err) || immutableField.MatchString(err.Error())
}
