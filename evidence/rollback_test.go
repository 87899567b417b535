package evidence

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

const (
	pvc = `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: db}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: fast
  resources: {requests: {storage: 1Gi}}
`
	pv = `apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-1}
spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], hostPath: {path: /data}}
`
	statefulSet = `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: db}
spec:
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: "db:1"}]}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
`
	service = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: apps}
spec: {clusterIP: 10.0.0.10, selector: {app: web}, ports: [{port: 80}]}
`
	daemonSet = `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: apps}
spec:
  selector: {matchLabels: {app: agent}}
  template: {metadata: {labels: {app: agent}}, spec: {containers: [{name: a, image: "agent:1"}]}}
`
	job = `apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: apps}
spec:
  template: {spec: {restartPolicy: Never, containers: [{name: m, image: "migrate:1"}]}}
`
	migration = `apiVersion: batch/v1
kind: Job
metadata:
  name: migrate-v2
  namespace: apps
  annotations: {tidegate.dev/irreversible: "drops column users.legacy_id"}
spec:
  template: {spec: {restartPolicy: Never, containers: [{name: m, image: "migrate:2"}]}}
`
	crd = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - {name: v1alpha1, served: true, storage: false}
  - {name: v1, served: true, storage: true}
`
	configMap = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: apps}\ndata: {k: v}\n"
)

// edit replaces old with new in a fixture and fails the test when old is not there, so a
// fixture typo cannot turn a case into a no-op.
func edit(t *testing.T, doc, old, new string) string {
	t.Helper()
	if !strings.Contains(doc, old) {
		t.Fatalf("fixture does not contain %q", old)
	}
	return strings.Replace(doc, old, new, 1)
}

// brief lists a classification as "category: Kind ns/name field change" lines.
func brief(s RollbackSafety) []string {
	out := []string{}
	for _, c := range []struct {
		name string
		l    []Finding
	}{
		{"pruned", s.PrunedStateful}, {"stateful", s.ChangedStateful}, {"crd", s.CRDChanges},
		{"immutable", s.ImmutableRecreates}, {"irreversible", s.Irreversible},
	} {
		for _, f := range c.l {
			out = append(out, strings.TrimSpace(fmt.Sprintf("%s: %s %s/%s %s %s", c.name, f.Kind, f.Namespace, f.Name, f.Field, f.Change)))
		}
	}
	return out
}

func TestClassifyRollback(t *testing.T) {
	all := []string{pvc, pv, statefulSet, service, daemonSet, job, crd, configMap, deployment, namespace}
	cases := []struct {
		name      string
		knownGood []string
		candidate func(t *testing.T) []string
		want      []string
	}{
		{name: "identical", knownGood: all, candidate: func(*testing.T) []string { return all }, want: []string{}},
		{name: "image bump and a new config map", knownGood: all, candidate: func(t *testing.T) []string {
			return []string{pvc, pv, statefulSet, service, daemonSet, job, crd, configMap, namespace,
				edit(t, deployment, "web:1.0", "web:1.1"),
				"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra, namespace: apps}\n"}
		}, want: []string{}},
		{name: "stateful objects pruned", knownGood: all, candidate: func(*testing.T) []string {
			return []string{service, daemonSet, crd, deployment}
		}, want: []string{ // sorted by apiVersion first, as rendered objects are
			"pruned: StatefulSet db/db  removed",
			"pruned: Namespace /apps  removed",
			"pruned: PersistentVolume /pv-1  removed",
			"pruned: PersistentVolumeClaim db/data  removed",
		}},
		{name: "prune disabled is not pruned", knownGood: []string{edit(t, pvc, "namespace: db}", "namespace: db, annotations: {kustomize.toolkit.fluxcd.io/prune: disabled}}")},
			candidate: func(*testing.T) []string { return nil }, want: []string{}},
		{name: "moving to another version of the group is not a prune", knownGood: []string{edit(t, statefulSet, "apps/v1", "apps/v1beta2")},
			candidate: func(*testing.T) []string { return []string{statefulSet} }, want: []string{}},
		{name: "claim template resized", knownGood: all, candidate: func(t *testing.T) []string {
			return replace(all, statefulSet, edit(t, statefulSet, "storage: 1Gi", "storage: 5Gi"))
		}, want: []string{"stateful: StatefulSet db/db spec.volumeClaimTemplates[data] changed"}},
		{name: "claim template renamed", knownGood: all, candidate: func(t *testing.T) []string {
			return replace(all, statefulSet, edit(t, statefulSet, "metadata: {name: data}", "metadata: {name: data2}"))
		}, want: []string{
			"stateful: StatefulSet db/db spec.volumeClaimTemplates[data2] added",
			"stateful: StatefulSet db/db spec.volumeClaimTemplates[data] removed",
		}},
		{name: "claim resized", knownGood: all, candidate: func(t *testing.T) []string {
			return replace(all, pvc, edit(t, pvc, "storage: 1Gi", "storage: 2Gi"))
		}, want: []string{"stateful: PersistentVolumeClaim db/data spec.resources changed"}},
		{name: "claim class and access modes", knownGood: all, candidate: func(t *testing.T) []string {
			return replace(all, pvc, edit(t, edit(t, pvc, "storageClassName: fast", "storageClassName: slow"), "[ReadWriteOnce]", "[ReadWriteMany]"))
		}, want: []string{
			"stateful: PersistentVolumeClaim db/data spec.accessModes changed",
			"stateful: PersistentVolumeClaim db/data spec.storageClassName changed",
			"immutable: PersistentVolumeClaim db/data spec.accessModes changed",
			"immutable: PersistentVolumeClaim db/data spec.storageClassName changed",
		}},
		{name: "served version removed", knownGood: all, candidate: func(t *testing.T) []string {
			return replace(all, crd, edit(t, crd, "  - {name: v1alpha1, served: true, storage: false}\n", ""))
		}, want: []string{"crd: CustomResourceDefinition /widgets.example.com spec.versions[v1alpha1] removed"}},
		{name: "version no longer served", knownGood: all, candidate: func(t *testing.T) []string {
			return replace(all, crd, edit(t, crd, "{name: v1alpha1, served: true", "{name: v1alpha1, served: false"))
		}, want: []string{"crd: CustomResourceDefinition /widgets.example.com spec.versions[v1alpha1] removed"}},
		{name: "storage version changed", knownGood: all, candidate: func(t *testing.T) []string {
			c := edit(t, crd, "{name: v1alpha1, served: true, storage: false}", "{name: v1alpha1, served: true, storage: true}")
			return replace(all, crd, edit(t, c, "{name: v1, served: true, storage: true}", "{name: v1, served: true, storage: false}"))
		}, want: []string{"crd: CustomResourceDefinition /widgets.example.com spec.versions changed"}},
		{name: "new served version is fine", knownGood: all, candidate: func(t *testing.T) []string {
			return replace(all, crd, crd+"  - {name: v2, served: true, storage: false}\n")
		}, want: []string{}},
		{name: "crd dropped", knownGood: all, candidate: func(*testing.T) []string { return replace(all, crd) },
			want: []string{"crd: CustomResourceDefinition /widgets.example.com  removed"}},
		{name: "workload selectors", knownGood: all, candidate: func(t *testing.T) []string {
			l := replace(all, deployment, edit(t, deployment, "selector: {matchLabels: {app: web}}", "selector: {matchLabels: {app: web, tier: front}}"))
			l = replace(l, daemonSet, edit(t, daemonSet, "{app: agent}}\n", "{app: agent2}}\n"))
			return replace(l, statefulSet, edit(t, statefulSet, "selector: {matchLabels: {app: db}}", "selector: {matchLabels: {app: db2}}"))
		}, want: []string{
			"immutable: DaemonSet apps/agent spec.selector changed",
			"immutable: Deployment /web spec.selector changed",
			"immutable: StatefulSet db/db spec.selector changed",
		}},
		{name: "statefulset service name and pod management", knownGood: all, candidate: func(t *testing.T) []string {
			s := edit(t, statefulSet, "serviceName: db", "serviceName: db-headless\n  podManagementPolicy: Parallel")
			return replace(all, statefulSet, s)
		}, want: []string{
			"immutable: StatefulSet db/db spec.podManagementPolicy changed",
			"immutable: StatefulSet db/db spec.serviceName changed",
		}},
		{name: "spelling out the default pod management policy is no change", knownGood: all, candidate: func(t *testing.T) []string {
			return replace(all, statefulSet, edit(t, statefulSet, "serviceName: db", "serviceName: db\n  podManagementPolicy: OrderedReady"))
		}, want: []string{}},
		{name: "cluster IP changed", knownGood: all, candidate: func(t *testing.T) []string {
			return replace(all, service, edit(t, service, "10.0.0.10", "10.0.0.11"))
		}, want: []string{"immutable: Service apps/web spec.clusterIP changed"}},
		{name: "cluster IP set where it was allocated", knownGood: []string{edit(t, service, "clusterIP: 10.0.0.10, ", "")}, candidate: func(*testing.T) []string {
			return []string{service}
		}, want: []string{"immutable: Service apps/web spec.clusterIP changed"}},
		{name: "cluster IP left out keeps the allocated one", knownGood: all, candidate: func(t *testing.T) []string {
			return replace(all, service, edit(t, service, "clusterIP: 10.0.0.10, ", ""))
		}, want: []string{}},
		{name: "job template changed", knownGood: all, candidate: func(t *testing.T) []string {
			return replace(all, job, edit(t, job, "migrate:1", "migrate:1.1"))
		}, want: []string{"immutable: Job apps/migrate spec.template changed"}},
		{name: "irreversible added", knownGood: all, candidate: func(*testing.T) []string { return append(all, migration) },
			want: []string{"irreversible: Job apps/migrate-v2  added"}},
		{name: "irreversible unchanged", knownGood: append(all, migration), candidate: func(*testing.T) []string { return append(all, migration) },
			want: []string{}},
		{name: "irreversible changed", knownGood: append(all, migration), candidate: func(t *testing.T) []string {
			return append(all, edit(t, migration, "migrate:2", "migrate:3"))
		}, want: []string{
			"immutable: Job apps/migrate-v2 spec.template changed",
			"irreversible: Job apps/migrate-v2  changed",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ClassifyRollback(objects(t, tc.knownGood...), objects(t, tc.candidate(t)...))
			if got.FirstRollout {
				t.Errorf("FirstRollout with a known-good")
			}
			if b := brief(got); !reflect.DeepEqual(b, tc.want) {
				t.Errorf("classified\n  %s\nwant\n  %s", strings.Join(b, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// replace returns docs with old swapped for the given docs (or removed).
func replace(docs []string, old string, with ...string) []string {
	out := []string{}
	for _, d := range docs {
		if d == old {
			out = append(out, with...)
			continue
		}
		out = append(out, d)
	}
	return out
}

func TestClassifyRollbackFirstRollout(t *testing.T) {
	got := ClassifyRollback(nil, objects(t, pvc, statefulSet, crd, migration))
	if !got.FirstRollout {
		t.Fatalf("FirstRollout is false without a known-good")
	}
	if b, want := brief(got), []string{"irreversible: Job apps/migrate-v2  added"}; !reflect.DeepEqual(b, want) {
		t.Errorf("classified %q, want only the irreversible job %q", b, want)
	}
	if f := got.Irreversible[0]; f.Reason != "drops column users.legacy_id" || f.APIVersion != "batch/v1" {
		t.Errorf("finding %+v: want the annotation's reason and the object's apiVersion", f)
	}

	// A known-good that rendered nothing is still a known-good.
	if ClassifyRollback(objects(t), objects(t, pvc)).FirstRollout {
		t.Errorf("an empty known-good render counts as a first rollout")
	}
}

func TestClassifyRollbackEncodesEmptyLists(t *testing.T) {
	data, err := json.Marshal(ClassifyRollback(objects(t, configMap), objects(t, configMap)))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"firstRollout":false,"prunedStateful":[],"changedStateful":[],"crdChanges":[],"immutableRecreates":[],"irreversible":[]}`
	if string(data) != want {
		t.Errorf("encoded %s\nwant %s", data, want)
	}
}

func TestClassifyRollbackIsOrderIndependent(t *testing.T) {
	good := objects(t, pvc, pv, statefulSet, namespace, crd)
	cand := objects(t, migration, edit(t, service, "10.0.0.10", "10.0.0.11"))
	want := ClassifyRollback(good, cand)
	for i := range 5 {
		rotate := func(l []string) []string { return append(l[i%len(l):], l[:i%len(l)]...) }
		g := objects(t, rotate([]string{pvc, pv, statefulSet, namespace, crd})...)
		c := objects(t, rotate([]string{migration, edit(t, service, "10.0.0.10", "10.0.0.11")})...)
		if got := ClassifyRollback(g, c); !reflect.DeepEqual(got, want) {
			t.Fatalf("rotation %d changed the classification:\n%+v\nwant\n%+v", i, got, want)
		}
	}
	if len(want.PrunedStateful) != 4 {
		t.Fatalf("fixture should prune four stateful objects, got %d", len(want.PrunedStateful))
	}
}

// Merge is the union of two classifications of the same revisions, each finding once, sorted.
func TestRollbackSafetyMerge(t *testing.T) {
	a := ClassifyRollback(objects(t, pvc, service), objects(t, edit(t, pvc, "storage: 1Gi", "storage: 2Gi"), service))
	b := ClassifyRollback(objects(t, pvc, service), objects(t, edit(t, pvc, "storage: 1Gi", "storage: 3Gi"), edit(t, service, "10.0.0.10", "10.0.0.11")))
	a.Merge(b)
	want := []string{
		"stateful: PersistentVolumeClaim db/data spec.resources changed",
		"immutable: Service apps/web spec.clusterIP changed",
	}
	if got := brief(a); !reflect.DeepEqual(got, want) {
		t.Errorf("merged %q, want %q", got, want)
	}
	var empty RollbackSafety
	empty.Merge(ClassifyRollback(nil, objects(t, migration)))
	if empty.PrunedStateful == nil || len(empty.Irreversible) != 1 {
		t.Errorf("merged into nothing: %+v", empty)
	}
}
