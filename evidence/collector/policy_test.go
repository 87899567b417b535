package collector

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tidegate/tidegate/verdict"
)

func TestCompilePolicy(t *testing.T) {
	def := string(verdict.DefaultPolicyFiles()["default.cue"])
	for _, tc := range []struct {
		name    string
		files   map[string]string
		dir     string
		wantErr string
		soak    time.Duration
	}{
		{name: "the default policy, copied", files: map[string]string{"/policy/policy.cue": def}, dir: "/policy", soak: time.Minute},
		{name: "settings changed, extra file of the package, other files ignored",
			files: map[string]string{
				"/policy/policy.cue":     strings.Replace(def, `soak:           "1m"`, `soak:           "5m"`, 1),
				"/policy/provenance.cue": "package policy\n\ndeploySafe: source: verified: true\n",
				"/policy/README.md":      "not CUE",
				"/policy/sub/other.cue":  "package other\n",
			},
			dir: "/policy", soak: 5 * time.Minute},
		{name: "no such directory", files: map[string]string{"/policy/policy.cue": def}, dir: "/policies", wantErr: "the artifact has no directory policies: fix spec.policy.path"},
		{name: "no CUE file", files: map[string]string{"/policy/README.md": "x"}, dir: "/policy", wantErr: "no .cue file in policy"},
		{name: "a syntax error", files: map[string]string{"/policy/policy.cue": strings.Replace(def, "settings: {", "settings: {{", 1)}, dir: "/policy", wantErr: "policy.cue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := filesys.MakeFsInMemory()
			for name, content := range tc.files {
				if err := fsys.WriteFile(name, []byte(content)); err != nil {
					t.Fatal(err)
				}
			}
			p, err := (&Collector{}).compilePolicy(context.Background(), fsys, tc.dir)
			if tc.wantErr != "" {
				var perr *verdict.PolicyError
				if !errors.As(err, &perr) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want a policy error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Settings.Soak != tc.soak || !strings.HasPrefix(p.Policy.Digest(), "sha256:") {
				t.Errorf("soak %s digest %s", p.Settings.Soak, p.Policy.Digest())
			}
		})
	}
}
