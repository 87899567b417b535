package v1alpha1_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/apis/meta"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/tidegate/tidegate/api/v1alpha1"
)

// admissionCase is one object sent to the API server as a user would write it (YAML, hence
// unstructured: fields can be left out or mistyped) and what the server must answer.
type admissionCase struct {
	name string
	kind string
	// objName is the object's metadata.name; empty gives a short name of its own.
	objName string
	spec    map[string]any
	// wantErr is empty when the object must be accepted; otherwise the server must reject the object
	// as Invalid with a message containing every one of these substrings.
	wantErr []string
}

// obj is a JSON-like map; numbers are int64 as in unstructured objects.
type obj = map[string]any

// rolloutSpec is a minimal valid FleetRollout spec with the given fields set (a nil value removes one).
func rolloutSpec(set obj) obj {
	spec := obj{
		"sourceRef": obj{"kind": "GitRepository", "name": "app"},
		"path":      "./deploy",
		"waves":     []any{wave("all", "selector", obj{})},
	}
	for k, v := range set {
		if v == nil {
			delete(spec, k)
		} else {
			spec[k] = v
		}
	}
	return spec
}

// healthCheckExprs is n entries of a template's healthCheckExprs, one per kind, with or without
// their required current.
func healthCheckExprs(n int, current bool) []any {
	out := make([]any, n)
	for i := range out {
		e := obj{"apiVersion": "example.com/v1", "kind": fmt.Sprintf("Widget%d", i), "failed": "status.phase == 'Failed'"}
		if current {
			e["current"] = "status.phase == 'Ready'"
		}
		out[i] = e
	}
	return out
}

// wave is a wave named name with the given field/value pairs.
func wave(name string, kv ...any) obj {
	w := obj{"name": name}
	for i := 0; i+1 < len(kv); i += 2 {
		w[kv[i].(string)] = kv[i+1]
	}
	return w
}

func waves(ws ...obj) []any {
	out := make([]any, len(ws))
	for i, w := range ws {
		out[i] = w
	}
	return out
}

// clusterSpec is a valid FleetCluster spec with the given fields set (a nil value removes one).
func clusterSpec(set obj) obj {
	spec := obj{
		"kubeConfig": obj{"secretRef": obj{"name": "member-1-kubeconfig", "key": "value"}},
		"maintenanceWindows": []any{
			obj{"days": []any{"Sat", "Sun"}, "start": "02:00", "duration": "4h"},
		},
	}
	for k, v := range set {
		if v == nil {
			delete(spec, k)
		} else {
			spec[k] = v
		}
	}
	return spec
}

// receiptSpec is a valid GateReceipt spec with the given fields set (a nil value removes one).
func receiptSpec(set obj) obj {
	spec := obj{
		"gate":           "deploySafe",
		"rollout":        "app",
		"wave":           "canary",
		"candidate":      obj{"revision": "main@sha1:0123456789abcdef0123456789abcdef01234567", "digest": "sha256:aa"},
		"targets":        []any{"member-1"},
		"evidence":       obj{"clusters": obj{"member-1": obj{"ready": true}}},
		"evidenceDigest": "sha256:bb",
		"result":         "Pass",
		"evaluatedAt":    "2026-11-30T12:00:00Z",
	}
	for k, v := range set {
		if v == nil {
			delete(spec, k)
		} else {
			spec[k] = v
		}
	}
	return spec
}

func TestAdmission(t *testing.T) {
	ctx, c, ns := setup(t)

	const rollout, cluster, receipt = v1alpha1.FleetRolloutKind, v1alpha1.FleetClusterKind, v1alpha1.GateReceiptKind
	cases := []admissionCase{
		// FleetRollout waves.
		{name: "minimal rollout", kind: rollout, spec: rolloutSpec(nil)},
		{name: "no waves", kind: rollout, spec: rolloutSpec(obj{"waves": nil})},
		{name: "deletionPolicy Delete", kind: rollout, spec: rolloutSpec(obj{"deletionPolicy": "Delete"})},
		// Template healthCheckExprs, validated as Flux's Kustomization validates them, at most 64.
		{name: "healthCheckExprs", kind: rollout, spec: rolloutSpec(obj{"template": obj{"healthCheckExprs": healthCheckExprs(64, true)}})},
		{
			name: "healthCheckExprs without current", kind: rollout, spec: rolloutSpec(obj{"template": obj{"healthCheckExprs": healthCheckExprs(1, false)}}),
			wantErr: []string{"spec.template.healthCheckExprs[0].current", "Required value"},
		},
		{
			name: "65 healthCheckExprs", kind: rollout, spec: rolloutSpec(obj{"template": obj{"healthCheckExprs": healthCheckExprs(65, true)}}),
			wantErr: []string{"spec.template.healthCheckExprs", "must have at most 64 items"},
		},
		// Template dependsOn: other rollouts, each once; decryption: sops with a Secret.
		{
			name: "dependsOn", kind: rollout, objName: "dependent",
			spec: rolloutSpec(obj{"template": obj{"dependsOn": []any{obj{"name": "platform"}, obj{"name": "crds"}}}}),
		},
		{
			name: "dependsOn itself", kind: rollout, objName: "self",
			spec:    rolloutSpec(obj{"template": obj{"dependsOn": []any{obj{"name": "platform"}, obj{"name": "self"}}}}),
			wantErr: []string{"a FleetRollout cannot depend on itself"},
		},
		{
			name: "dependsOn twice", kind: rollout,
			spec:    rolloutSpec(obj{"template": obj{"dependsOn": []any{obj{"name": "platform"}, obj{"name": "platform"}}}}),
			wantErr: []string{"spec.template.dependsOn[1]", "Duplicate value"},
		},
		{name: "decryption", kind: rollout, spec: rolloutSpec(obj{"template": obj{"decryption": obj{"secretRef": obj{"name": "sops-age"}}}})},
		{
			name: "decryption without a Secret", kind: rollout, spec: rolloutSpec(obj{"template": obj{"decryption": obj{"provider": "sops"}}}),
			wantErr: []string{"spec.template.decryption.secretRef", "Required value"},
		},
		{
			name: "decryption by another provider", kind: rollout,
			spec:    rolloutSpec(obj{"template": obj{"decryption": obj{"provider": "vault", "secretRef": obj{"name": "k"}}}}),
			wantErr: []string{"spec.template.decryption.provider", `supported values: "sops"`},
		},
		// Charts: from an OCIRepository or a HelmChart without a path, or a GitRepository's
		// directory; a HelmChart for a chart only; the template's kustomize-only fields refused.
		{
			name: "chart from an OCIRepository", kind: rollout,
			spec: rolloutSpec(obj{"sourceRef": obj{"kind": "OCIRepository", "name": "web-chart"}, "path": nil,
				"chart": obj{"releaseName": "web", "values": obj{"replicaCount": int64(2), "ingress": obj{"enabled": true}}}}),
		},
		{name: "chart from a GitRepository's directory", kind: rollout, spec: rolloutSpec(obj{"path": "./charts/web", "chart": obj{}})},
		{
			name: "chart from an OCIRepository with a path", kind: rollout,
			spec:    rolloutSpec(obj{"sourceRef": obj{"kind": "OCIRepository", "name": "web-chart"}, "chart": obj{}}),
			wantErr: []string{"spec.path must be empty for a chart from an OCIRepository"},
		},
		{
			name: "chart from a HelmChart", kind: rollout,
			spec: rolloutSpec(obj{"sourceRef": obj{"kind": "HelmChart", "name": "web"}, "path": nil, "chart": obj{"releaseName": "web"}}),
		},
		{
			name: "chart from a HelmChart with a path", kind: rollout,
			spec:    rolloutSpec(obj{"sourceRef": obj{"kind": "HelmChart", "name": "web"}, "path": "./charts/web", "chart": obj{}}),
			wantErr: []string{"spec.path must be empty for a chart from a HelmChart"},
		},
		{
			name: "HelmChart source without spec.chart", kind: rollout,
			spec:    rolloutSpec(obj{"sourceRef": obj{"kind": "HelmChart", "name": "web"}, "path": nil}),
			wantErr: []string{"a HelmChart source serves a Helm chart: a rollout of it sets spec.chart"},
		},
		{
			name: "policy sourceRef kind HelmChart", kind: rollout,
			spec:    rolloutSpec(obj{"policy": obj{"sourceRef": obj{"kind": "HelmChart", "name": "policies"}}}),
			wantErr: []string{"spec.policy.sourceRef", "a policy is read from a GitRepository or OCIRepository"},
		},
		{
			name: "chart with patches", kind: rollout,
			spec:    rolloutSpec(obj{"chart": obj{}, "template": obj{"patches": []any{obj{"patch": "x"}}}}),
			wantErr: []string{"a chart rollout (spec.chart) writes HelmReleases", "spec.chart.values"},
		},
		{
			name: "chart release name too long", kind: rollout,
			spec:    rolloutSpec(obj{"chart": obj{"releaseName": strings.Repeat("r", 54)}}),
			wantErr: []string{"spec.chart.releaseName", "may not be more than 53"},
		},
		{name: "rollback timeout", kind: rollout, spec: rolloutSpec(obj{"rollback": obj{"timeout": "90s"}})},
		{
			name: "rollback timeout below 10s", kind: rollout, spec: rolloutSpec(obj{"rollback": obj{"timeout": "5s"}}),
			wantErr: []string{"spec.rollback.timeout", "must be between 10s and 24h"},
		},
		{
			name: "rollback timeout above 24h", kind: rollout, spec: rolloutSpec(obj{"rollback": obj{"timeout": "25h"}}),
			wantErr: []string{"spec.rollback.timeout", "must be between 10s and 24h"},
		},
		{name: "rollout named with 63 characters", kind: rollout, spec: rolloutSpec(nil), objName: strings.Repeat("r", 63)},
		{
			name: "rollout named with 64 characters", kind: rollout, spec: rolloutSpec(nil), objName: strings.Repeat("r", 64),
			wantErr: []string{"a FleetRollout's name may be at most 63 characters", "tidegate.dev/rollout label"},
		},
		{name: "cluster named with 63 characters", kind: cluster, spec: clusterSpec(nil), objName: strings.Repeat("c", 63)},
		{
			name: "cluster named with 64 characters", kind: cluster, spec: clusterSpec(nil), objName: strings.Repeat("c", 64),
			wantErr: []string{"a FleetCluster's name may be at most 63 characters", "tidegate.dev/cluster label"},
		},
		{
			name: "deletionPolicy not Orphan or Delete", kind: rollout,
			spec:    rolloutSpec(obj{"deletionPolicy": "MirrorPrune"}),
			wantErr: []string{"spec.deletionPolicy", `supported values: "Orphan", "Delete"`},
		},
		{
			name: "duplicate wave names", kind: rollout,
			spec: rolloutSpec(obj{"waves": waves(
				wave("canary", "count", int64(1)), wave("ring", "percent", int64(40)), wave("canary", "selector", obj{}))}),
			wantErr: []string{"spec.waves", "wave names must be unique"},
		},
		{
			name: "distinct wave names", kind: rollout,
			spec: rolloutSpec(obj{"waves": waves(
				wave("canary", "count", int64(1)), wave("ring", "percent", int64(40)), wave("all", "selector", obj{}))}),
		},
		{
			name: "wave percent 0", kind: rollout,
			spec:    rolloutSpec(obj{"waves": waves(wave("ring", "percent", int64(0)))}),
			wantErr: []string{"spec.waves[0].percent", "should be greater than or equal to 1"},
		},
		{
			name: "wave percent 101", kind: rollout,
			spec:    rolloutSpec(obj{"waves": waves(wave("ring", "percent", int64(101)))}),
			wantErr: []string{"spec.waves[0].percent", "should be less than or equal to 100"},
		},
		{name: "wave percent 1", kind: rollout, spec: rolloutSpec(obj{"waves": waves(wave("ring", "percent", int64(1)))})},
		{name: "wave percent 100", kind: rollout, spec: rolloutSpec(obj{"waves": waves(wave("ring", "percent", int64(100)))})},
		{
			name: "wave count 0", kind: rollout,
			spec:    rolloutSpec(obj{"waves": waves(wave("canary", "count", int64(0)))}),
			wantErr: []string{"spec.waves[0].count", "should be greater than or equal to 1"},
		},
		{
			name: "wave without selector, count or percent", kind: rollout,
			spec:    rolloutSpec(obj{"waves": waves(wave("canary", "count", int64(1)), wave("empty", "soak", "10m"))}),
			wantErr: []string{"spec.waves[1]", "a wave must set selector, count or percent"},
		},
		{
			name: "wave with count and percent", kind: rollout,
			spec:    rolloutSpec(obj{"waves": waves(wave("ring", "count", int64(2), "percent", int64(40)))}),
			wantErr: []string{"spec.waves[0]", "a wave sets count or percent, not both"},
		},
		{
			name: "wave with selector and count", kind: rollout,
			spec: rolloutSpec(obj{"waves": waves(wave("canary",
				"selector", obj{"matchLabels": obj{"tier": "canary"}}, "count", int64(1)))}),
		},
		{
			name: "wave name not a DNS label", kind: rollout,
			spec:    rolloutSpec(obj{"waves": waves(wave("Canary_1", "count", int64(1)))}),
			wantErr: []string{"spec.waves[0].name", "should match"},
		},

		// Nothing vacuous: a failure budget that covers the wave, a soak of nothing.
		{
			name: "maxFailures equal to count", kind: rollout,
			spec:    rolloutSpec(obj{"waves": waves(wave("ring", "count", int64(3), "maxFailures", int64(3)))}),
			wantErr: []string{"spec.waves[0]", "maxFailures must be less than count"},
		},
		{
			name: "maxFailures above count", kind: rollout,
			spec:    rolloutSpec(obj{"waves": waves(wave("canary", "count", int64(1), "maxFailures", int64(2)))}),
			wantErr: []string{"spec.waves[0]", "maxFailures must be less than count"},
		},
		{name: "maxFailures below count", kind: rollout, spec: rolloutSpec(obj{"waves": waves(wave("ring", "count", int64(3), "maxFailures", int64(2)))})},
		// A percent or selector wave's size is known when it is planned; the engine checks it then.
		{name: "maxFailures with percent", kind: rollout, spec: rolloutSpec(obj{"waves": waves(wave("ring", "percent", int64(10), "maxFailures", int64(5)))})},
		{
			name: "soak 0s", kind: rollout,
			spec:    rolloutSpec(obj{"waves": waves(wave("canary", "count", int64(1), "soak", "0s"))}),
			wantErr: []string{"spec.waves[0].soak", "soak must be longer than 0s"},
		},
		{
			name: "soak of zeros in other units", kind: rollout,
			spec:    rolloutSpec(obj{"waves": waves(wave("canary", "count", int64(1), "soak", "0h0.0m"))}),
			wantErr: []string{"spec.waves[0].soak", "soak must be longer than 0s"},
		},
		{name: "soak 1ms", kind: rollout, spec: rolloutSpec(obj{"waves": waves(wave("canary", "count", int64(1), "soak", "1ms"))})},
		{name: "soak 168h", kind: rollout, spec: rolloutSpec(obj{"waves": waves(wave("canary", "count", int64(1), "soak", "168h"))})},
		{
			name: "soak of ten years", kind: rollout,
			spec:    rolloutSpec(obj{"waves": waves(wave("canary", "count", int64(1), "soak", "87600h"))}),
			wantErr: []string{"spec.waves[0].soak", "soak must be at most 168h (7 days)", "spec.hold"},
		},
		{
			name: "soak of 168h and a minute", kind: rollout,
			spec:    rolloutSpec(obj{"waves": waves(wave("canary", "count", int64(1), "soak", "168h1m"))}),
			wantErr: []string{"spec.waves[0].soak", "at most 168h"},
		},

		// Paths stay inside the artifact.
		{name: "path at the root", kind: rollout, spec: rolloutSpec(obj{"path": "./"})},
		{name: "path without ./", kind: rollout, spec: rolloutSpec(obj{"path": "deploy/web"})},
		{name: "path with dots in names", kind: rollout, spec: rolloutSpec(obj{"path": "./deploy/..web../v1..2"})},
		{
			name: "path that climbs out", kind: rollout,
			spec:    rolloutSpec(obj{"path": "../../etc"}),
			wantErr: []string{"spec.path", "path must stay inside the source's artifact", "such as ./deploy/web"},
		},
		{
			name: "path that climbs out in the middle", kind: rollout,
			spec:    rolloutSpec(obj{"path": "./deploy/../../etc"}),
			wantErr: []string{"spec.path", "path must stay inside the source's artifact"},
		},
		{
			name: "absolute path", kind: rollout,
			spec:    rolloutSpec(obj{"path": "/etc"}),
			wantErr: []string{"spec.path", "path must stay inside the source's artifact"},
		},
		{
			name: "policy path that climbs out", kind: rollout,
			spec:    rolloutSpec(obj{"policy": obj{"sourceRef": obj{"kind": "GitRepository", "name": "policies"}, "path": "policies/.."}}),
			wantErr: []string{"spec.policy.path", "path must stay inside the source's artifact"},
		},

		// FleetRollout approvals.
		{
			name: "approval with empty revision", kind: rollout,
			spec:    rolloutSpec(obj{"approvals": []any{obj{"revision": "", "wave": "all", "by": "ops"}}}),
			wantErr: []string{"spec.approvals[0].revision", "should be at least 1 chars long"},
		},
		{
			name: "approval without revision", kind: rollout,
			spec:    rolloutSpec(obj{"approvals": []any{obj{"wave": "all", "by": "ops"}}}),
			wantErr: []string{"spec.approvals[0].revision", "Required value"},
		},
		{
			name: "approval with revision", kind: rollout,
			spec: rolloutSpec(obj{"approvals": []any{obj{"revision": "main@sha1:0123456789abcdef", "wave": "all", "by": "ops"}}}),
		},

		// FleetRollout class and owner.
		{
			name: "unknown class", kind: rollout,
			spec:    rolloutSpec(obj{"class": "Experimental"}),
			wantErr: []string{"spec.class", `Unsupported value: "Experimental"`},
		},
		{
			name: "SystemConfiguration without owner", kind: rollout,
			spec:    rolloutSpec(obj{"class": "SystemConfiguration"}),
			wantErr: []string{"a SystemConfiguration rollout must name its owner in spec.owner"},
		},
		{
			name: "SystemConfiguration with empty owner", kind: rollout,
			spec:    rolloutSpec(obj{"class": "SystemConfiguration", "owner": ""}),
			wantErr: []string{"a SystemConfiguration rollout must name its owner in spec.owner"},
		},
		{name: "SystemConfiguration with owner", kind: rollout, spec: rolloutSpec(obj{"class": "SystemConfiguration", "owner": "platform"})},
		{name: "SystemService without owner", kind: rollout, spec: rolloutSpec(obj{"class": "SystemService"})},

		// FleetRollout hold, rollback and source.
		{
			name: "hold without reason", kind: rollout,
			spec:    rolloutSpec(obj{"hold": obj{}}),
			wantErr: []string{"spec.hold.reason", "Required value"},
		},
		{
			name: "hold with empty reason", kind: rollout,
			spec:    rolloutSpec(obj{"hold": obj{"reason": ""}}),
			wantErr: []string{"spec.hold.reason", "should be at least 1 chars long"},
		},
		{name: "hold with reason", kind: rollout, spec: rolloutSpec(obj{"hold": obj{"reason": "incident INC-42"}})},
		{
			name: "unknown onFailure", kind: rollout,
			spec:    rolloutSpec(obj{"rollback": obj{"onFailure": "Ignore"}}),
			wantErr: []string{"spec.rollback.onFailure", `Unsupported value: "Ignore"`},
		},
		{name: "onFailure Rollback", kind: rollout, spec: rolloutSpec(obj{"rollback": obj{"onFailure": "Rollback"}})},
		{name: "onFailure Hold", kind: rollout, spec: rolloutSpec(obj{"rollback": obj{"onFailure": "Hold"}})},
		{
			name: "sourceRef kind Bucket", kind: rollout,
			spec:    rolloutSpec(obj{"sourceRef": obj{"kind": "Bucket", "name": "app"}}),
			wantErr: []string{"spec.sourceRef.kind", `Unsupported value: "Bucket"`},
		},
		{
			name: "sourceRef without name", kind: rollout,
			spec:    rolloutSpec(obj{"sourceRef": obj{"kind": "GitRepository"}}),
			wantErr: []string{"spec.sourceRef.name", "Required value"},
		},
		{
			name: "no sourceRef", kind: rollout,
			spec:    rolloutSpec(obj{"sourceRef": nil}),
			wantErr: []string{"spec.sourceRef", "Required value"},
		},
		{name: "sourceRef OCIRepository", kind: rollout, spec: rolloutSpec(obj{"sourceRef": obj{"kind": "OCIRepository", "name": "app"}})},
		{
			name: "policy sourceRef kind Bucket", kind: rollout,
			spec:    rolloutSpec(obj{"policy": obj{"sourceRef": obj{"kind": "Bucket", "name": "policies"}}}),
			wantErr: []string{"spec.policy.sourceRef.kind", `Unsupported value: "Bucket"`},
		},

		// FleetCluster.
		{name: "cluster with kubeConfig and maintenance window", kind: cluster, spec: clusterSpec(nil)},
		{name: "hub cluster", kind: cluster, spec: obj{}},
		{name: "probe every 10s", kind: cluster, spec: clusterSpec(obj{"interval": "10s"})},
		{
			name: "probe every 1ms", kind: cluster,
			spec:    clusterSpec(obj{"interval": "1ms"}),
			wantErr: []string{"spec.interval", "interval must be at least 10s", "leave it out for 1m"},
		},
		{
			name: "probe every 9.5s", kind: cluster,
			spec:    clusterSpec(obj{"interval": "9.5s"}),
			wantErr: []string{"spec.interval", "at least 10s"},
		},
		{
			name: "maintenance window start 24:00", kind: cluster,
			spec: clusterSpec(obj{"maintenanceWindows": []any{
				obj{"start": "24:00", "duration": "1h"}}}),
			wantErr: []string{"spec.maintenanceWindows[0].start", "should match"},
		},
		{
			name: "maintenance window on an unknown day", kind: cluster,
			spec: clusterSpec(obj{"maintenanceWindows": []any{
				obj{"days": []any{"Funday"}, "start": "02:00", "duration": "1h"}}}),
			wantErr: []string{"spec.maintenanceWindows[0].days[0]", `Unsupported value: "Funday"`},
		},
		{
			name: "maintenance window without duration", kind: cluster,
			spec: clusterSpec(obj{"maintenanceWindows": []any{
				obj{"start": "02:00"}}}),
			wantErr: []string{"spec.maintenanceWindows[0].duration", "Required value"},
		},
		{
			name: "kubeConfig without a reference", kind: cluster,
			spec:    clusterSpec(obj{"kubeConfig": obj{}}),
			wantErr: []string{"spec.kubeConfig", "exactly one of spec.kubeConfig.configMapRef or spec.kubeConfig.secretRef must be specified"},
		},

		// FleetCluster values.
		{name: "cluster with values", kind: cluster, spec: clusterSpec(obj{"values": obj{"namespace": "team-a", "_region": "eu", "SIZE_2": "large", "empty": ""}})},
		{
			name: "value name with a dash", kind: cluster,
			spec:    clusterSpec(obj{"values": obj{"team-name": "a"}}),
			wantErr: []string{"spec.values", "a value's name must be a postBuild variable name"},
		},
		{
			name: "value name starting with a digit", kind: cluster,
			spec:    clusterSpec(obj{"values": obj{"1region": "eu"}}),
			wantErr: []string{"spec.values", "a value's name must be a postBuild variable name"},
		},
		{
			name: "value name with ${", kind: cluster,
			spec:    clusterSpec(obj{"values": obj{"${namespace}": "x"}}),
			wantErr: []string{"spec.values", "a value's name must be a postBuild variable name"},
		},
		{
			name: "value over 4096 bytes", kind: cluster,
			spec:    clusterSpec(obj{"values": obj{"blob": strings.Repeat("x", 4097)}}),
			wantErr: []string{"spec.values", "a value may be at most 4096 bytes"},
		},
		{name: "value of 4096 bytes", kind: cluster, spec: clusterSpec(obj{"values": obj{"blob": strings.Repeat("x", 4096)}})},
		{
			name: "more than 64 values", kind: cluster,
			spec:    clusterSpec(obj{"values": manyValues(65)}),
			wantErr: []string{"spec.values", "must have at most 64 items"},
		},
		{name: "64 values", kind: cluster, spec: clusterSpec(obj{"values": manyValues(64)})},
		{
			name: "value not a string", kind: cluster,
			spec:    clusterSpec(obj{"values": obj{"replicas": int64(3)}}),
			wantErr: []string{"spec.values.replicas", "must be of type string"},
		},

		// GateReceipt creation (its immutability is TestGateReceiptIsImmutable).
		{name: "receipt", kind: receipt, spec: receiptSpec(nil)},
		{
			name: "receipt of an unknown gate", kind: receipt,
			spec:    receiptSpec(obj{"gate": "looksFine"}),
			wantErr: []string{"spec.gate", `Unsupported value: "looksFine"`},
		},
		{
			name: "receipt with an unknown result", kind: receipt,
			spec:    receiptSpec(obj{"result": "Maybe"}),
			wantErr: []string{"spec.result", `Unsupported value: "Maybe"`},
		},
		{
			name: "receipt without rollout", kind: receipt,
			spec:    receiptSpec(obj{"rollout": nil}),
			wantErr: []string{"spec.rollout", "Required value"},
		},
		{name: "receipt with compressed evidence", kind: receipt, spec: receiptSpec(obj{"evidence": nil, "evidenceGzip": "H4sIAAAAAAACA6tWKk8sS1WyUkpOzEssqlSqBQAXWB5VEQAAAA=="})},
		// Standard base64 has / and +, which a byte-formatted field would make the CEL rules fail on.
		{name: "receipt with compressed evidence in standard base64", kind: receipt, spec: receiptSpec(obj{"evidence": nil, "evidenceGzip": "H4sIAAAAAAAC/9TdT29c2bUd8K8i1+Fg=="})},
		{
			name: "receipt with evidence parts", kind: receipt,
			spec: receiptSpec(obj{"evidence": nil, "evidenceParts": []any{
				obj{"name": "app-deploysafe-0123456789ab-" + strings.Repeat("a", 12), "digest": "sha256:" + strings.Repeat("a", 64)}}}),
		},
		{
			name: "receipt with evidence inline and compressed", kind: receipt,
			spec:    receiptSpec(obj{"evidenceGzip": "H4sIAAAAAAACA6tWKk8sS1WyUkpOzEssqlSqBQAXWB5VEQAAAA=="}),
			wantErr: []string{"a GateReceipt keeps its evidence one way: in evidence, evidenceGzip or evidenceParts"},
		},
		{
			name: "receipt with evidence inline and in parts", kind: receipt,
			spec: receiptSpec(obj{"evidenceParts": []any{
				obj{"name": "part", "digest": "sha256:" + strings.Repeat("a", 64)}}}),
			wantErr: []string{"a GateReceipt keeps its evidence one way: in evidence, evidenceGzip or evidenceParts"},
		},
		{
			name: "receipt part with a bad digest", kind: receipt,
			spec:    receiptSpec(obj{"evidence": nil, "evidenceParts": []any{obj{"name": "part", "digest": "md5:aa"}}}),
			wantErr: []string{"spec.evidenceParts[0].digest", "should match"},
		},
		{
			name: "receipt part without a name", kind: receipt,
			spec:    receiptSpec(obj{"evidence": nil, "evidenceParts": []any{obj{"digest": "sha256:" + strings.Repeat("a", 64)}}}),
			wantErr: []string{"spec.evidenceParts[0].name", "Required value"},
		},
		{
			name: "receipt with compressed evidence over 32 KiB", kind: receipt,
			spec:    receiptSpec(obj{"evidence": nil, "evidenceGzip": strings.Repeat("AAAA", 43696/4)}),
			wantErr: []string{"spec.evidenceGzip", "Too long"},
		},
	}

	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := tc.objName
			if name == "" {
				name = fmt.Sprintf("case-%02d", i)
			}
			u := &unstructured.Unstructured{Object: obj{
				"apiVersion": v1alpha1.GroupVersion.String(),
				"kind":       tc.kind,
				"metadata":   obj{"name": name, "namespace": ns},
				"spec":       tc.spec,
			}}
			err := c.Create(ctx, u)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("a valid %s was rejected: %v", tc.kind, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("an invalid %s was accepted; want an error containing %q", tc.kind, tc.wantErr)
			}
			t.Logf("rejected: %v", err)
			if !apierrors.IsInvalid(err) {
				t.Errorf("want an Invalid (422) error, got %T: %v", err, err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err.Error(), want)
				}
			}
		})
	}
}

func TestValidObjectsAreAcceptedWithDefaults(t *testing.T) {
	ctx, c, ns := setup(t)

	t.Run("FleetRollout", func(t *testing.T) {
		fro := &v1alpha1.FleetRollout{
			ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns},
			Spec: v1alpha1.FleetRolloutSpec{
				SourceRef: v1alpha1.SourceReference{Kind: "GitRepository", Name: "podinfo"},
				Path:      "./kustomize",
				Template: v1alpha1.KustomizationTemplate{
					TargetNamespace: "podinfo",
					Timeout:         &metav1.Duration{Duration: 3 * time.Minute},
					HealthCheckExprs: []kustomize.CustomHealthCheck{{APIVersion: "cert-manager.io/v1", Kind: "Certificate",
						HealthCheckExpressions: kustomize.HealthCheckExpressions{
							Current: "status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'True')",
							Failed:  "status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'False')",
						}}},
				},
				ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
				Waves: []v1alpha1.Wave{
					{Name: "canary", Count: ptr[int32](1), Soak: &metav1.Duration{Duration: 10 * time.Minute}, RequireApproval: true},
					{Name: "ring", Percent: ptr[int32](40), MaxFailures: ptr[int32](1)},
					{Name: "all", Selector: &metav1.LabelSelector{}},
				},
				Owner:       "team-podinfo",
				Cadence:     "weekly",
				BlastRadius: "tenant",
				Approvals:   []v1alpha1.Approval{{Revision: "main@sha1:0123456789abcdef", Wave: "canary", By: "alice"}},
			},
		}
		if err := c.Create(ctx, fro); err != nil {
			t.Fatalf("creating a valid FleetRollout: %v", err)
		}
		got := &v1alpha1.FleetRollout{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(fro), got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.Class != v1alpha1.ClassUserWorkload {
			t.Errorf("spec.class defaulted to %q, want %q", got.Spec.Class, v1alpha1.ClassUserWorkload)
		}
		if got.Spec.DeletionPolicy != v1alpha1.DeletionPolicyOrphan {
			t.Errorf("spec.deletionPolicy defaulted to %q, want %q: deleting a rollout must not prune its members unless asked", got.Spec.DeletionPolicy, v1alpha1.DeletionPolicyOrphan)
		}
		if got.Spec.Rollback.OnFailure != "" {
			t.Errorf("spec.rollback.onFailure defaulted to %q, want it left empty for the policy to decide", got.Spec.Rollback.OnFailure)
		}
		if len(got.Spec.Waves) != 3 {
			t.Fatalf("got %d waves, want 3", len(got.Spec.Waves))
		}
		if s := got.Spec.Waves[2].Selector; s == nil || len(s.MatchLabels) != 0 || len(s.MatchExpressions) != 0 {
			t.Errorf("wave all: selector {} (every remaining cluster) came back as %#v", s)
		}
		want := fro.Spec.DeepCopy()
		want.Class = v1alpha1.ClassUserWorkload
		want.DeletionPolicy = v1alpha1.DeletionPolicyOrphan
		if !apiequality.Semantic.DeepEqual(*want, got.Spec) {
			t.Errorf("spec did not round-trip:\nsent %+v\ngot  %+v", *want, got.Spec)
		}
	})

	// Written as YAML would be: no class and no rollback at all.
	t.Run("FleetRollout without class and rollback", func(t *testing.T) {
		u := &unstructured.Unstructured{Object: obj{
			"apiVersion": v1alpha1.GroupVersion.String(),
			"kind":       v1alpha1.FleetRolloutKind,
			"metadata":   obj{"name": "from-yaml", "namespace": ns},
			"spec":       rolloutSpec(nil),
		}}
		if err := c.Create(ctx, u); err != nil {
			t.Fatalf("creating a minimal FleetRollout: %v", err)
		}
		got := &v1alpha1.FleetRollout{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.Class != v1alpha1.ClassUserWorkload {
			t.Errorf("spec.class defaulted to %q, want %q", got.Spec.Class, v1alpha1.ClassUserWorkload)
		}
		if got.Spec.Rollback.OnFailure != "" {
			t.Errorf("spec.rollback.onFailure defaulted to %q, want it left empty for the policy to decide", got.Spec.Rollback.OnFailure)
		}
	})

	t.Run("FleetCluster", func(t *testing.T) {
		fc := &v1alpha1.FleetCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "member-1", Namespace: ns, Labels: map[string]string{"env": "prod", "tier": "canary"}},
			Spec: v1alpha1.FleetClusterSpec{
				KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "member-1-kubeconfig", Key: "value"}},
				OptIns:     []string{"node-config", "platform/*"},
				MaintenanceWindows: []v1alpha1.MaintenanceWindow{
					{Days: []string{"Sat", "Sun"}, Start: "02:00", Duration: metav1.Duration{Duration: 4 * time.Hour}},
					{Start: "23:30", Duration: metav1.Duration{Duration: 30 * time.Minute}},
				},
				Interval: &metav1.Duration{Duration: 30 * time.Second},
			},
		}
		if err := c.Create(ctx, fc); err != nil {
			t.Fatalf("creating a valid FleetCluster: %v", err)
		}
		got := &v1alpha1.FleetCluster{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(fc), got); err != nil {
			t.Fatal(err)
		}
		if !apiequality.Semantic.DeepEqual(fc.Spec, got.Spec) {
			t.Errorf("spec did not round-trip:\nsent %+v\ngot  %+v", fc.Spec, got.Spec)
		}
	})

	t.Run("GateReceipt", func(t *testing.T) {
		gr := validReceipt(ns, "deploysafe-canary-0123456789ab")
		if err := c.Create(ctx, gr); err != nil {
			t.Fatalf("creating a valid GateReceipt: %v", err)
		}
		got := &v1alpha1.GateReceipt{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(gr), got); err != nil {
			t.Fatal(err)
		}
		var sent, kept any
		if err := json.Unmarshal(gr.Spec.Evidence.Raw, &sent); err != nil {
			t.Fatal(err)
		}
		if got.Spec.Evidence == nil {
			t.Fatal("spec.evidence was dropped")
		}
		if err := json.Unmarshal(got.Spec.Evidence.Raw, &kept); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(sent, kept) {
			t.Errorf("evidence was pruned or changed:\nsent %s\nkept %s", gr.Spec.Evidence.Raw, got.Spec.Evidence.Raw)
		}
		got.Spec.Evidence, gr.Spec.Evidence = nil, nil
		if !apiequality.Semantic.DeepEqual(gr.Spec, got.Spec) {
			t.Errorf("spec did not round-trip:\nsent %+v\ngot  %+v", gr.Spec, got.Spec)
		}
	})
}

func TestGateReceiptIsImmutable(t *testing.T) {
	ctx, c, ns := setup(t)

	gr := validReceipt(ns, "deploysafe-canary-0123456789ab")
	if err := c.Create(ctx, gr); err != nil {
		t.Fatalf("creating a valid GateReceipt: %v", err)
	}
	created := gr.Spec.DeepCopy()

	cases := []struct {
		name    string
		change  func(*v1alpha1.GateReceipt)
		allowed bool
	}{
		{name: "result", change: func(r *v1alpha1.GateReceipt) { r.Spec.Result = v1alpha1.ResultFail }},
		{name: "evidence", change: func(r *v1alpha1.GateReceipt) {
			r.Spec.Evidence = &apiextensionsv1.JSON{Raw: []byte(`{"clusters":{"member-1":{"ready":false}}}`)}
		}},
		{name: "evidence removed", change: func(r *v1alpha1.GateReceipt) { r.Spec.Evidence = nil }},
		{name: "evidence compressed instead", change: func(r *v1alpha1.GateReceipt) {
			r.Spec.Evidence, r.Spec.EvidenceGzip = nil, "H4sIAAAAAAACA6tWKk8sS1WyUkpOzEssqlSqBQAXWB5VEQAAAA=="
		}},
		{name: "evidence moved to parts", change: func(r *v1alpha1.GateReceipt) {
			r.Spec.Evidence = nil
			r.Spec.EvidenceParts = []v1alpha1.EvidencePart{{Name: "part", Digest: "sha256:" + strings.Repeat("b", 64)}}
		}},
		{name: "reasons", change: func(r *v1alpha1.GateReceipt) { r.Spec.Reasons = append(r.Spec.Reasons, "overridden by hand") }},
		{name: "targets", change: func(r *v1alpha1.GateReceipt) { r.Spec.Targets = []string{"member-1"} }},
		{name: "knownGood removed", change: func(r *v1alpha1.GateReceipt) { r.Spec.KnownGood = nil }},
		{name: "candidate digest", change: func(r *v1alpha1.GateReceipt) { r.Spec.Candidate.Digest = "sha256:cc" }},
		{name: "evaluatedAt", change: func(r *v1alpha1.GateReceipt) {
			r.Spec.EvaluatedAt = metav1.NewTime(r.Spec.EvaluatedAt.Add(time.Hour))
		}},
		{name: "labels", allowed: true, change: func(r *v1alpha1.GateReceipt) {
			r.Labels = map[string]string{v1alpha1.RolloutLabel: "podinfo", "audit": "reviewed"}
		}},
		{name: "annotations", allowed: true, change: func(r *v1alpha1.GateReceipt) {
			r.Annotations = map[string]string{"tidegate.dev/note": "seen by ops"}
		}},
		{name: "nothing", allowed: true, change: func(*v1alpha1.GateReceipt) {}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &v1alpha1.GateReceipt{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(gr), r); err != nil {
				t.Fatal(err)
			}
			tc.change(r)
			err := c.Update(ctx, r)
			if tc.allowed {
				if err != nil {
					t.Fatalf("changing the receipt's %s was rejected: %v", tc.name, err)
				}
			} else {
				if err == nil {
					t.Fatalf("changing the receipt's %s was accepted", tc.name)
				}
				if !apierrors.IsInvalid(err) {
					t.Errorf("want an Invalid (422) error, got %T: %v", err, err)
				}
				if want := "a GateReceipt is immutable"; !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err.Error(), want)
				}
			}
			after := &v1alpha1.GateReceipt{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(gr), after); err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(*created, after.Spec) {
				t.Errorf("the stored spec changed:\ncreated %+v\nnow     %+v", *created, after.Spec)
			}
		})
	}

	t.Run("merge patch of the spec", func(t *testing.T) {
		r := &v1alpha1.GateReceipt{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(gr), r); err != nil {
			t.Fatal(err)
		}
		err := c.Patch(ctx, r, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"result":"Fail"}}`)))
		if err == nil || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "a GateReceipt is immutable") {
			t.Fatalf("patching spec.result: want an Invalid error saying the receipt is immutable, got %v", err)
		}
	})
}

func validReceipt(ns, name string) *v1alpha1.GateReceipt {
	return &v1alpha1.GateReceipt{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.GateReceiptSpec{
			Gate:    v1alpha1.GateDeploySafe,
			Rollout: "podinfo",
			Wave:    "canary",
			Candidate: v1alpha1.RevisionStatus{
				Revision: "main@sha1:0123456789abcdef0123456789abcdef01234567",
				Digest:   "sha256:aa",
				Source:   "podinfo-0123456789ab",
			},
			KnownGood: &v1alpha1.RevisionStatus{
				Revision: "main@sha1:fedcba9876543210fedcba9876543210fedcba98",
				Digest:   "sha256:dd",
			},
			Targets:      []string{"member-1", "member-2"},
			Class:        v1alpha1.ClassUserWorkload,
			Owner:        "team-podinfo",
			PolicyDigest: "builtin:sha256:ee",
			Evidence: &apiextensionsv1.JSON{Raw: []byte(`{"clusters":{"member-1":{"ready":true,"revision":"main@sha1:0123"},` +
				`"member-2":{"ready":true,"restarts":[0,1],"nothing":null}},"window":"10m","score":0.97}`)},
			EvidenceDigest: "sha256:bb",
			Result:         v1alpha1.ResultPass,
			Reasons:        []string{"all targets ready"},
			Limits:         []string{"does not establish behaviour under load"},
			EvaluatedAt:    metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)),
		},
	}
}

func ptr[T any](v T) *T { return &v }

// manyValues is n valid FleetCluster values.
func manyValues(n int) obj {
	v := obj{}
	for i := range n {
		v[fmt.Sprintf("value_%d", i)] = "x"
	}
	return v
}

// TestChartCannotBeAddedOrRemoved: a rollout writes Kustomizations or HelmReleases for its whole
// life; its chart's values may change (a new candidate), its kind of package may not.
func TestChartCannotBeAddedOrRemoved(t *testing.T) {
	ctx, c, ns := setup(t)
	for _, tc := range []struct {
		name        string
		from, to    obj
		wantRefused bool
	}{
		{name: "chart added", from: rolloutSpec(nil), to: rolloutSpec(obj{"chart": obj{}}), wantRefused: true},
		{name: "chart removed", from: rolloutSpec(obj{"chart": obj{}}), to: rolloutSpec(nil), wantRefused: true},
		{name: "chart values changed", from: rolloutSpec(obj{"chart": obj{}}), to: rolloutSpec(obj{"chart": obj{"values": obj{"a": "b"}}})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: obj{"apiVersion": v1alpha1.GroupVersion.String(), "kind": v1alpha1.FleetRolloutKind,
				"metadata": obj{"name": strings.ReplaceAll(tc.name, " ", "-"), "namespace": ns}, "spec": tc.from}}
			if err := c.Create(ctx, u); err != nil {
				t.Fatal(err)
			}
			u.Object["spec"] = tc.to
			err := c.Update(ctx, u)
			switch {
			case tc.wantRefused && err == nil:
				t.Fatal("the update was accepted")
			case tc.wantRefused && !strings.Contains(err.Error(), "spec.chart cannot be added or removed"):
				t.Fatalf("refused with %v, want the message that names spec.chart", err)
			case !tc.wantRefused && err != nil:
				t.Fatalf("refused: %v", err)
			}
		})
	}
}
