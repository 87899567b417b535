package verdict

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goEvidence is the Go type each gate's evidence decodes into: the contract's other side.
func goEvidence(gate string) any {
	switch gate {
	case GateDeploySafe:
		return &DeploySafeEvidence{}
	case GateNoDisruption:
		return &NoDisruptionEvidence{}
	case GateRollbackSafe:
		return &RollbackSafeEvidence{}
	}
	return &RollbackSucceedsEvidence{}
}

// checkDecision holds what every decision must keep to, whatever the policy and the evidence: an
// error or a recovered panic never passes, evidence that is not a JSON object never passes, and
// a gate that passes has evidence the collectors' Go types read, about a rollout.
func checkDecision(t *testing.T, gate string, evidence []byte, d Decision, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), "recovered from a panic") {
		t.Fatalf("%s: CUE panicked on this input: %v", gate, err)
	}
	if err != nil && d.Pass {
		t.Fatalf("%s: an error (%v) with a Pass", gate, err)
	}
	if !d.Pass {
		if err == nil && len(d.Reasons) == 0 {
			t.Fatalf("%s: failed without an error or a reason", gate)
		}
		return
	}
	if len(d.Reasons) != 0 {
		t.Fatalf("%s: passed with reasons %v", gate, d.Reasons)
	}
	trimmed := bytes.TrimSpace(evidence)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		t.Fatalf("%s: passed on evidence that is not a JSON object: %q", gate, evidence)
	}
	dec := json.NewDecoder(bytes.NewReader(evidence))
	dec.DisallowUnknownFields()
	ev := goEvidence(gate)
	if err := dec.Decode(ev); err != nil {
		t.Fatalf("%s: passed on evidence the Go evidence type does not read (%v): %s", gate, err, evidence)
	}
	var common struct {
		Rollout string   `json:"rollout"`
		Targets []string `json:"targets"`
	}
	_ = json.Unmarshal(evidence, &common)
	if common.Rollout == "" {
		t.Fatalf("%s: passed on evidence about no rollout: %s", gate, evidence)
	}
}

// evidenceSeeds adds every evidence fixture of testdata/evidence to f, one per gate.
func evidenceSeeds(f *testing.F, add func(gate int, evidence []byte)) {
	for i, gate := range Gates {
		files, _ := filepath.Glob(filepath.Join("..", "testdata", "evidence", gate, "*.json"))
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			add(i, b)
		}
		add(i, ExampleEvidence(gate))
	}
}

// FuzzEvaluate decides every gate with the built-in policy over arbitrary evidence, mutated from
// the fixtures: no panic, no pass on an error, on evidence that is not an object, on evidence the
// Go types do not read, or over no target for deploySafe and noDisruption (a gate over no cluster
// never passes); and the same evidence decides the same way twice.
func FuzzEvaluate(f *testing.F) {
	evidenceSeeds(f, func(gate int, evidence []byte) { f.Add(uint8(gate), evidence) })
	for _, garbage := range []string{"", "null", "[]", "{}", `"deploySafe"`, "0", "true", `{"rollout": 1}`, "{\"rollout\":\"a/b\",", "\xff"} {
		f.Add(uint8(0), []byte(garbage))
	}
	p := DefaultPolicy()
	f.Fuzz(func(t *testing.T, g uint8, evidence []byte) {
		gate := Gates[int(g)%len(Gates)]
		d, err := Evaluate(p, gate, evidence)
		checkDecision(t, gate, evidence, d, err)
		if d.Pass && (gate == GateDeploySafe || gate == GateNoDisruption) {
			var ev Evidence
			_ = json.Unmarshal(evidence, &ev)
			if len(ev.Targets) == 0 {
				t.Fatalf("%s passed over no target: %s", gate, evidence)
			}
		}
		again, err2 := Evaluate(p, gate, evidence)
		if again.Pass != d.Pass || (err == nil) != (err2 == nil) || strings.Join(again.Reasons, "\n") != strings.Join(d.Reasons, "\n") {
			t.Fatalf("%s decided %+v (%v), then %+v (%v)", gate, d, err, again, err2)
		}
	})
}

// FuzzPolicy loads arbitrary CUE as a policy, as a policy from a Git artifact is loaded, and
// decides a gate with it: loading fails with a *PolicyError or yields a policy whose settings read
// or fail with one, and the decision keeps to checkDecision whatever the policy says.
func FuzzPolicy(f *testing.F) {
	policies := []string{
		string(DefaultPolicyFiles()["default.cue"]),
		"package policy\n",
		"package policy\ndeploySafe: _\nnoDisruption: _\nrollbackSafe: _\nrollbackSucceeds: _\n",
		"package policy\ndeploySafe: {}\nnoDisruption: {}\nrollbackSafe: {}\nrollbackSucceeds: {}\nsettings: soak: \"0s\"\n",
		"package policy\ndeploySafe: rollout: string\nnoDisruption: {}\nrollbackSafe: {}\nrollbackSucceeds: {}\nsettings: {soak: \"1m\", onFail: \"Hold\"}\n",
		"package policy\ndeploySafe: 1\n",
		"package policy\nimport \"strings\"\ndeploySafe: rollout: strings.HasPrefix(\"fleet/\")\nnoDisruption: {}\nrollbackSafe: {}\nrollbackSucceeds: {}\n",
		"package policy\nsettings: soak: int\n",
		"package other\ndeploySafe: {}\n",
		"deploySafe: {",
	}
	for _, file := range []string{"deploySafe/pass.json", "noDisruption/pass.json", "rollbackSafe/pass-first-rollout.json", "rollbackSucceeds/pass-first-rollout.json"} {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "evidence", file))
		if err != nil {
			f.Fatal(err)
		}
		gate := uint8(0)
		for i, g := range Gates {
			if strings.HasPrefix(file, g+"/") {
				gate = uint8(i)
			}
		}
		for _, p := range policies {
			f.Add(p, gate, b)
		}
	}
	f.Add(policies[1], uint8(0), []byte("[]"))
	f.Fuzz(func(t *testing.T, src string, g uint8, evidence []byte) {
		gate := Gates[int(g)%len(Gates)]
		p, err := LoadPolicy(map[string][]byte{"policy.cue": []byte(src)})
		var pe *PolicyError
		if err != nil {
			if !errors.As(err, &pe) || len(pe.Problems) == 0 {
				t.Fatalf("LoadPolicy: %v (%T), want a *PolicyError with its problems", err, err)
			}
			return
		}
		if _, err := p.Settings(); err != nil && !errors.As(err, &pe) {
			t.Fatalf("Settings: %v (%T), want a *PolicyError", err, err)
		}
		d, err := Evaluate(p, gate, evidence)
		checkDecision(t, gate, evidence, d, err)
	})
}
