package ops

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tidegate/tidegate/verdict"
)

// ReadPolicyDir reads the .cue files of dir (not its subdirectories) by base name, as the controller
// takes the files of a rollout's spec.policy.path. The error is Invalid and names dir.
func ReadPolicyDir(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, Errorf(CodeInvalid, nil, "reading the policy: %w", err)
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".cue" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, Errorf(CodeInvalid, nil, "reading the policy: %w", err)
		}
		files[e.Name()] = b
	}
	if len(files) == 0 {
		return nil, Errorf(CodeInvalid, nil, "reading the policy: %s has no .cue files", dir)
	}
	return files, nil
}

// ProposedPolicy loads a policy that is not committed yet: the .cue files of dir, or files (file
// name to CUE text, as an assistant proposes one without writing it anywhere); exactly one of the
// two. A policy that cannot decide is Invalid, with the CUE problems and the fix.
func ProposedPolicy(dir string, files map[string]string) (*verdict.Policy, error) {
	var (
		src  map[string][]byte
		from string
	)
	switch {
	case (dir == "") == (len(files) == 0):
		return nil, Errorf(CodeInvalid, nil, "give the proposed policy as a directory of .cue files or as its files' content, one of the two")
	case dir != "":
		var err error
		if src, err = ReadPolicyDir(dir); err != nil {
			return nil, err
		}
		from = dir
	default:
		src = make(map[string][]byte, len(files))
		for name, text := range files {
			// The controller takes the base names of one directory's .cue files: anything else
			// would be a policy it never loads.
			if name != filepath.Base(name) || filepath.Ext(name) != ".cue" {
				return nil, Errorf(CodeInvalid, nil, "policy file %q: name the files as the .cue files of one directory (policy.cue), without a path", name)
			}
			src[name] = []byte(text)
		}
		from = "the policy files " + strings.Join(slices.Sorted(maps.Keys(files)), ", ")
	}
	p, err := verdict.LoadPolicy(src)
	if err != nil {
		msg := fmt.Sprintf("%s: %v", from, err)
		if pe := (*verdict.PolicyError)(nil); errors.As(err, &pe) {
			msg += "; tidegate policy vet lists every problem"
		}
		return nil, NewError(CodeInvalid, nil, msg, err)
	}
	return p, nil
}
