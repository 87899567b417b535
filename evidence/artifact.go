package evidence

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	_ "crypto/sha256" // registers sha256 with go-digest
	_ "crypto/sha512" // registers sha384 and sha512 with go-digest
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"

	godigest "github.com/opencontainers/go-digest"
	_ "github.com/opencontainers/go-digest/blake3" // registers blake3, as source-controller does
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

var (
	// ErrNotServed means source-controller did not serve the artifact (a non-2xx answer, such as
	// 404 after its storage lost the file).
	ErrNotServed = errors.New("artifact not served")
	// ErrDigestMismatch means the served artifact is not the content that was recorded.
	ErrDigestMismatch = errors.New("artifact digest mismatch")
	// ErrTooLarge means the artifact, or what it unpacks to, is over the limit it was given.
	ErrTooLarge = errors.New("artifact too large")
)

// FetchArtifact downloads a Flux artifact tarball from url (a source's status.artifact.url) and
// checks that its content has wantDigest ("<algorithm>:<hex>", as in status.artifact.digest;
// sha256, sha384, sha512 and blake3 are understood). It reads at most maxBytes. The errors wrap
// ErrNotServed, ErrDigestMismatch or ErrTooLarge so callers can tell "gone" from "changed"
// from "too big"; other errors are transport failures.
//
// The digest is checked here rather than trusted from status because a pinned source keeps
// reporting its last artifact after source-controller's storage lost it: only what is served
// proves a rollback target still exists.
func FetchArtifact(ctx context.Context, client *http.Client, url, wantDigest string, maxBytes int64) ([]byte, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("fetching artifact %s: the size limit must be positive, got %d", url, maxBytes)
	}
	algorithm, newHash, err := parseDigest(wantDigest)
	if err != nil {
		return nil, fmt.Errorf("fetching artifact %s: %w", url, err)
	}
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("fetching artifact %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetching artifact %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("%w: %s answered %s; the source no longer serves this artifact", ErrNotServed, url, resp.Status)
	}
	if resp.ContentLength > maxBytes {
		return nil, fmt.Errorf("%w: %s is %d bytes, over the limit of %d", ErrTooLarge, url, resp.ContentLength, maxBytes)
	}
	h := newHash()
	var buf bytes.Buffer
	n, err := io.Copy(io.MultiWriter(&buf, h), io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetching artifact %s: reading the body: %w", url, err)
	}
	if n > maxBytes {
		return nil, fmt.Errorf("%w: %s is over the limit of %d bytes", ErrTooLarge, url, maxBytes)
	}
	got := algorithm + ":" + hex.EncodeToString(h.Sum(nil))
	if got != strings.ToLower(wantDigest) {
		return nil, fmt.Errorf("%w: %s serves %s, but the recorded digest is %s", ErrDigestMismatch, url, got, wantDigest)
	}
	return buf.Bytes(), nil
}

// parseDigest reads "<algorithm>:<hex>" with the algorithms source-controller can be configured
// to write (--artifact-digest-algo: sha256, the default, sha384, sha512 and blake3, through
// go-digest as source-controller reads them) and checks the hex length, so a malformed recorded
// digest is reported as such instead of as a mismatch.
func parseDigest(d string) (string, func() hash.Hash, error) {
	algorithm, encoded, ok := strings.Cut(strings.ToLower(d), ":")
	if !ok {
		return "", nil, fmt.Errorf("digest %q is not of the form <algorithm>:<hex>", d)
	}
	a := godigest.Algorithm(algorithm)
	if !slices.Contains(digestAlgorithms, a) || !a.Available() {
		return "", nil, fmt.Errorf("digest %q uses %q; only sha256, sha384, sha512 and blake3 are understood", d, algorithm)
	}
	if err := a.Validate(encoded); err != nil {
		return "", nil, fmt.Errorf("digest %q does not hold a %s hash in hex", d, algorithm)
	}
	return algorithm, a.Hash, nil
}

// digestAlgorithms are the artifact digests source-controller writes.
var digestAlgorithms = []godigest.Algorithm{godigest.SHA256, godigest.SHA384, godigest.SHA512, godigest.BLAKE3}

// Artifact is an unpacked Flux artifact held in memory.
type Artifact struct {
	// FS holds the artifact's files, rooted at "/".
	FS filesys.FileSystem
	// Files and Bytes count the regular files and their content.
	Files int
	Bytes int64
	// Skipped lists entries (sorted) whose names kustomize's in-memory filesystem cannot hold
	// (it takes only [a-zA-Z0-9-_.:] and no ".." inside a name). They are left out rather than
	// failing the whole artifact, because a Git artifact is the whole repository and a stray
	// "notes (1).md" must not stop a rollout; Render fails when leaving one out could change
	// what it renders.
	Skipped []string
}

// legalName is what filesys.MakeFsInMemory accepts for a file or directory name.
var legalName = regexp.MustCompile(`^[a-zA-Z0-9\-_.:]+$`)

// Extract unpacks a gzipped tarball into memory. It refuses, naming the entry, anything
// that could land outside the artifact (absolute names, ".." elements, backslashes), symbolic
// and hard links (source-controller never puts them in an artifact and kustomize-controller
// refuses symlinks, so a render that followed them would not be what Flux applies), devices
// and other special files, more than maxFiles entries, and more than maxBytes of file content.
func Extract(tarGz []byte, maxFiles int, maxBytes int64) (*Artifact, error) {
	if maxFiles <= 0 || maxBytes <= 0 {
		return nil, fmt.Errorf("extracting artifact: limits must be positive, got %d files and %d bytes", maxFiles, maxBytes)
	}
	zr, err := gzip.NewReader(bytes.NewReader(tarGz))
	if err != nil {
		return nil, fmt.Errorf("extracting artifact: not a gzipped tarball: %w", err)
	}
	tr := tar.NewReader(zr)
	a := &Artifact{FS: filesys.MakeFsInMemory()}
	entries := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("extracting artifact: reading the tarball: %w", err)
		}
		entries++
		if entries > maxFiles {
			return nil, fmt.Errorf("%w: more than %d entries in the tarball", ErrTooLarge, maxFiles)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return nil, fmt.Errorf("extracting artifact: %w", err)
		}
		switch hdr.Typeflag {
		case tar.TypeReg: // the reader turns the old TypeRegA into TypeReg or TypeDir
			if hdr.Size < 0 || hdr.Size > maxBytes-a.Bytes {
				return nil, fmt.Errorf("%w: file %s takes the content over the limit of %d bytes", ErrTooLarge, hdr.Name, maxBytes)
			}
			a.Bytes += hdr.Size
			a.Files++
			if name == "" {
				return nil, fmt.Errorf("extracting artifact: file entry %q has no name", hdr.Name)
			}
			if !holdable(name) {
				a.Skipped = append(a.Skipped, name)
				continue
			}
			data, err := io.ReadAll(io.LimitReader(tr, hdr.Size))
			if err != nil {
				return nil, fmt.Errorf("extracting artifact: reading %s: %w", hdr.Name, err)
			}
			if err := a.FS.WriteFile("/"+name, data); err != nil {
				return nil, fmt.Errorf("extracting artifact: writing %s: %w", hdr.Name, err)
			}
		case tar.TypeDir:
			if name == "" {
				continue
			}
			if !holdable(name) {
				a.Skipped = append(a.Skipped, name+"/")
				continue
			}
			if err := a.FS.MkdirAll("/" + name); err != nil {
				return nil, fmt.Errorf("extracting artifact: creating directory %s: %w", hdr.Name, err)
			}
		case tar.TypeSymlink, tar.TypeLink:
			kind := "symbolic link"
			if hdr.Typeflag == tar.TypeLink {
				kind = "hard link"
			}
			if linkEscapes(name, hdr.Linkname, hdr.Typeflag == tar.TypeSymlink) {
				return nil, fmt.Errorf("extracting artifact: entry %s is a %s to %s, outside the artifact", hdr.Name, kind, hdr.Linkname)
			}
			return nil, fmt.Errorf("extracting artifact: entry %s is a %s; Flux artifacts hold only files and directories", hdr.Name, kind)
		case tar.TypeXGlobalHeader:
			continue
		default:
			return nil, fmt.Errorf("extracting artifact: entry %s has unsupported type %q", hdr.Name, string(hdr.Typeflag))
		}
	}
	return a, nil
}

// entryName cleans a tar entry name to a slash path relative to the artifact root ("" for the
// root itself) and refuses names that could reach outside it.
func entryName(raw string) (string, error) {
	if strings.ContainsRune(raw, '\\') || strings.ContainsRune(raw, 0) {
		return "", fmt.Errorf("entry %q has a backslash or NUL in its name", raw)
	}
	if strings.HasPrefix(raw, "/") {
		return "", fmt.Errorf("entry %q has an absolute name", raw)
	}
	for _, elem := range strings.Split(raw, "/") {
		if elem == ".." {
			return "", fmt.Errorf("entry %q has a \"..\" element", raw)
		}
	}
	name := path.Clean(raw)
	if name == "." {
		return "", nil
	}
	return name, nil
}

// holdable reports whether every element of a clean relative name fits the in-memory filesystem.
func holdable(name string) bool {
	for _, elem := range strings.Split(name, "/") {
		if !legalName.MatchString(elem) || strings.Contains(elem, "..") {
			return false
		}
	}
	return true
}

// linkEscapes reports whether a link at name pointing to target resolves outside the root.
// Symlink targets are relative to the link's directory, hard link targets to the root.
func linkEscapes(name, target string, symlink bool) bool {
	if target == "" || strings.HasPrefix(target, "/") {
		return true
	}
	base := "/"
	if symlink {
		base = path.Join("/", path.Dir(name))
	}
	depth := strings.Count(strings.Trim(base, "/"), "/")
	if base != "/" {
		depth++
	}
	for _, elem := range strings.Split(target, "/") {
		switch elem {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}
