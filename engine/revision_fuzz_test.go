package engine

import (
	"strings"
	"testing"
)

// FuzzSplitRevision splits any string as a Flux artifact revision: it never panics; a revision it
// accepts has a digest "<algo>:<hash>" with both parts non-empty and no '@', its parts compose back
// to a revision that splits the same way, and ref@digest is the revision itself (or the digest
// alone, for a revision without a ref).
func FuzzSplitRevision(f *testing.F) {
	for _, s := range []string{
		"main@sha1:4f2a9c0de1b3a5f7", "refs/heads/release@sha1:abc", "v1.2.3@sha256:" + strings.Repeat("ab", 32),
		"latest@sha256:" + strings.Repeat("0", 64), "sha256:" + strings.Repeat("cd", 32), "sha1:abc",
		"", "main", "main@", "main@sha1:", "main@:abc", "@sha1:abc", "a@b@sha1:abc", "main@sha1:abc@", "main@sha1::",
		"main@blake3:" + strings.Repeat("f", 64), "\x00@\xff:\x00",
		// Resource exhaustion: a 1 MiB revision, and one of nothing but '@' and ':'.
		strings.Repeat("a", 1<<20) + "@sha256:" + strings.Repeat("b", 64),
		strings.Repeat("@", 1<<16) + "sha1:abc", strings.Repeat("@:", 1<<16),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, revision string) {
		ref, digest, err := SplitRevision(revision)
		if err != nil {
			if ref != "" || digest != "" {
				t.Fatalf("SplitRevision(%q) failed with parts %q, %q", revision, ref, digest)
			}
			if !strings.Contains(err.Error(), "is not a Flux artifact revision") {
				t.Fatalf("SplitRevision(%q): error %q does not say what is wrong", revision, err)
			}
			return
		}
		algo, hash, ok := strings.Cut(digest, ":")
		if !ok || algo == "" || hash == "" || strings.Contains(digest, "@") {
			t.Fatalf("SplitRevision(%q) = digest %q, want <algo>:<hash> without '@'", revision, digest)
		}
		composed := digest
		if strings.Contains(revision, "@") {
			composed = ref + "@" + digest
		} else if ref != "" {
			t.Fatalf("SplitRevision(%q) = ref %q of a revision without '@'", revision, ref)
		}
		if composed != revision {
			t.Fatalf("SplitRevision(%q) = %q, %q, which compose to %q", revision, ref, digest, composed)
		}
		// The parts written back as a revision ("@" only with a ref) split to the same parts.
		canonical := digest
		if ref != "" {
			canonical = ref + "@" + digest
		}
		ref2, digest2, err := SplitRevision(canonical)
		if err != nil || ref2 != ref || digest2 != digest {
			t.Fatalf("SplitRevision(%q) = %q, %q; written back as %q they split to %q, %q, %v", revision, ref, digest, canonical, ref2, digest2, err)
		}
	})
}
