package evidence

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// entry is one tarball member; typ defaults to a regular file.
type entry struct {
	name, body string
	typ        byte
	link       string
}

func file(name, body string) entry { return entry{name: name, body: body} }
func dir(name string) entry        { return entry{name: name, typ: tar.TypeDir} }

// tarGz builds a gzipped tarball in memory the way an artifact is laid out.
func tarGz(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Linkname: e.link, Mode: 0o644}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("writing header %s: %v", e.name, err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatalf("writing %s: %v", e.name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sha256Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// memFS builds an in-memory filesystem from path → content.
func memFS(t testing.TB, files map[string]string) filesys.FileSystem {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	for p, body := range files {
		if err := fsys.WriteFile("/"+p, []byte(body)); err != nil {
			t.Fatalf("writing %s: %v", p, err)
		}
	}
	return fsys
}

// objects decodes YAML documents, one object each.
func objects(t testing.TB, docs ...string) []*unstructured.Unstructured {
	t.Helper()
	out := make([]*unstructured.Unstructured, 0, len(docs))
	for _, d := range docs {
		u := &unstructured.Unstructured{}
		j, err := yaml.YAMLToJSON([]byte(d))
		if err != nil {
			t.Fatalf("decoding fixture: %v\n%s", err, d)
		}
		if err := u.UnmarshalJSON(j); err != nil {
			t.Fatalf("decoding fixture: %v\n%s", err, d)
		}
		out = append(out, u)
	}
	return out
}
