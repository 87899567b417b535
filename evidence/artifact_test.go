package evidence

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/zeebo/blake3"
)

func TestFetchArtifact(t *testing.T) {
	body := tarGz(t, file("app/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"))
	good := sha256Digest(body)
	other := sha256Digest([]byte("something else"))
	// source-controller --artifact-digest-algo=blake3 (zeebo/blake3, which go-digest registers).
	sum, otherSum := blake3.Sum256(body), blake3.Sum256([]byte("something else"))
	goodBlake3, otherBlake3 := "blake3:"+hex.EncodeToString(sum[:]), "blake3:"+hex.EncodeToString(otherSum[:])

	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		switch r.URL.Path {
		case "/artifact.tar.gz":
			_, _ = w.Write(body)
		case "/chunked.tar.gz":
			// No Content-Length: the limit must hold while reading, not only from the header.
			w.Header().Set("Transfer-Encoding", "chunked")
			w.(http.Flusher).Flush()
			_, _ = w.Write(body)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	cases := []struct {
		name      string
		path      string
		digest    string
		max       int64
		wantErr   error
		wantInErr []string
		noRequest bool
	}{
		{name: "digest matches", path: "/artifact.tar.gz", digest: good, max: 1 << 20},
		{name: "digest in upper case matches", path: "/artifact.tar.gz", digest: strings.ToUpper(good), max: 1 << 20},
		{name: "digest mismatch names both", path: "/artifact.tar.gz", digest: other, max: 1 << 20,
			wantErr: ErrDigestMismatch, wantInErr: []string{good, other}},
		{name: "blake3 digest matches", path: "/artifact.tar.gz", digest: goodBlake3, max: 1 << 20},
		{name: "blake3 digest mismatch names both", path: "/artifact.tar.gz", digest: otherBlake3, max: 1 << 20,
			wantErr: ErrDigestMismatch, wantInErr: []string{goodBlake3, otherBlake3}},
		{name: "malformed blake3 digest is not fetched", path: "/artifact.tar.gz", digest: "blake3:" + hex.EncodeToString(sum[:16]), max: 1 << 20,
			wantInErr: []string{"does not hold a blake3 hash"}, noRequest: true},
		{name: "too big by content length", path: "/artifact.tar.gz", digest: good, max: int64(len(body)) - 1,
			wantErr: ErrTooLarge},
		{name: "too big while reading", path: "/chunked.tar.gz", digest: good, max: int64(len(body)) - 1,
			wantErr: ErrTooLarge},
		{name: "exactly the limit", path: "/chunked.tar.gz", digest: good, max: int64(len(body))},
		{name: "not served", path: "/gone.tar.gz", digest: good, max: 1 << 20,
			wantErr: ErrNotServed, wantInErr: []string{"404"}},
		{name: "malformed digest is not fetched", path: "/artifact.tar.gz", digest: "sha256:zz", max: 1 << 20,
			wantInErr: []string{`"sha256:zz"`}, noRequest: true},
		{name: "unknown algorithm is not fetched", path: "/artifact.tar.gz", digest: "md5:d41d8cd98f00b204e9800998ecf8427e", max: 1 << 20,
			wantInErr: []string{"md5"}, noRequest: true},
		{name: "no limit is refused", path: "/artifact.tar.gz", digest: good, max: 0,
			wantInErr: []string{"limit"}, noRequest: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := requests.Load()
			got, err := FetchArtifact(context.Background(), srv.Client(), srv.URL+tc.path, tc.digest, tc.max)
			if tc.noRequest && requests.Load() != before {
				t.Errorf("a request was made for an invalid call")
			}
			if tc.wantErr == nil && len(tc.wantInErr) == 0 {
				if err != nil {
					t.Fatalf("FetchArtifact: %v", err)
				}
				if !bytes.Equal(got, body) {
					t.Fatalf("got %d bytes, want the %d served", len(got), len(body))
				}
				return
			}
			if err == nil {
				t.Fatalf("FetchArtifact succeeded, want an error")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %q does not wrap %v", err, tc.wantErr)
			}
			for _, s := range tc.wantInErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestFetchArtifactHonoursContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := FetchArtifact(ctx, srv.Client(), srv.URL, sha256Digest(nil), 1024)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
}

func TestExtract(t *testing.T) {
	a, err := Extract(tarGz(t,
		dir("./"),
		dir("./apps/"),
		file("./apps/web/deploy.yaml", "kind: Deployment"),
		file("README.md", "hello"),
		file("docs/notes (1).md", "skipped"),
		dir("my dir/"),
	), 10, 1<<10)
	if err != nil {
		t.Fatalf("Extract: %v", err)
	}
	if a.Files != 3 || a.Bytes != int64(len("kind: Deployment")+len("hello")+len("skipped")) {
		t.Errorf("counted %d files, %d bytes", a.Files, a.Bytes)
	}
	if got, err := a.FS.ReadFile("/apps/web/deploy.yaml"); err != nil || string(got) != "kind: Deployment" {
		t.Errorf("apps/web/deploy.yaml: %q, %v", got, err)
	}
	if !a.FS.IsDir("/apps") {
		t.Errorf("apps is not a directory")
	}
	if want := []string{"docs/notes (1).md", "my dir/"}; strings.Join(a.Skipped, ",") != strings.Join(want, ",") {
		t.Errorf("skipped %q, want %q", a.Skipped, want)
	}
}

func TestExtractRefuses(t *testing.T) {
	cases := []struct {
		name    string
		entries []entry
		files   int
		bytes   int64
		want    string
		wantErr error
	}{
		{name: "parent escape", entries: []entry{file("../evil.yaml", "x")}, want: `".." element`},
		{name: "nested parent escape", entries: []entry{file("a/../../evil.yaml", "x")}, want: `".." element`},
		{name: "harmless looking parent", entries: []entry{file("a/../b.yaml", "x")}, want: `".." element`},
		{name: "absolute", entries: []entry{file("/etc/passwd", "x")}, want: "absolute"},
		{name: "backslash", entries: []entry{file(`..\evil.yaml`, "x")}, want: "backslash"},
		{name: "symlink out", entries: []entry{{name: "app/link", typ: tar.TypeSymlink, link: "../../etc/passwd"}}, want: "outside the artifact"},
		{name: "absolute symlink", entries: []entry{{name: "link", typ: tar.TypeSymlink, link: "/etc/passwd"}}, want: "outside the artifact"},
		{name: "symlink inside", entries: []entry{file("a.yaml", "x"), {name: "b.yaml", typ: tar.TypeSymlink, link: "a.yaml"}}, want: "only files and directories"},
		{name: "hard link out", entries: []entry{{name: "a/b", typ: tar.TypeLink, link: "../x"}}, want: "outside the artifact"},
		{name: "hard link inside", entries: []entry{file("a.yaml", "x"), {name: "b.yaml", typ: tar.TypeLink, link: "a.yaml"}}, want: "only files and directories"},
		{name: "device", entries: []entry{{name: "dev", typ: tar.TypeChar}}, want: "unsupported type"},
		{name: "too many entries", entries: []entry{file("a", "1"), file("b", "2"), file("c", "3")}, files: 2, want: "more than 2 entries", wantErr: ErrTooLarge},
		{name: "too many bytes", entries: []entry{file("a", "12345"), file("b", "67890")}, bytes: 9, want: "over the limit", wantErr: ErrTooLarge},
		{name: "file over a file", entries: []entry{file("a", "1"), file("a/b", "2")}, want: "writing a/b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files, size := tc.files, tc.bytes
			if files == 0 {
				files = 100
			}
			if size == 0 {
				size = 1 << 20
			}
			_, err := Extract(tarGz(t, tc.entries...), files, size)
			if err == nil {
				t.Fatalf("Extract succeeded, want an error mentioning %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %q does not wrap %v", err, tc.wantErr)
			}
		})
	}
	if _, err := Extract([]byte("not gzip"), 10, 10); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("garbage: %v", err)
	}
}

func TestLinkEscapes(t *testing.T) {
	cases := []struct {
		name, target string
		symlink      bool
		want         bool
	}{
		{"a/b/link", "../c", true, false},
		{"a/b/link", "../../c", true, false},
		{"a/b/link", "../../../c", true, true},
		{"link", "x/../../y", true, true},
		{"a/link", "/etc", true, true},
		{"a/b/link", "../../c", false, true},
		{"a/b/link", "c/d", false, false},
		{"link", "", true, true},
	}
	for _, tc := range cases {
		if got := linkEscapes(tc.name, tc.target, tc.symlink); got != tc.want {
			t.Errorf("linkEscapes(%q, %q, symlink=%v) = %v, want %v", tc.name, tc.target, tc.symlink, got, tc.want)
		}
	}
}

// FuzzExtract feeds arbitrary tarball member names and link targets through Extract: it must
// never panic, never hold a path outside the root, and keep to its limits.
func FuzzExtract(f *testing.F) {
	f.Add("app/x.yaml", "body", uint8(0), "")
	f.Add("../x", "", uint8(0), "")
	f.Add("a/../../x", "", uint8(0), "")
	f.Add("/abs", "", uint8(0), "")
	f.Add("link", "", uint8(1), "../../etc")
	f.Add("a/link", "", uint8(2), "a/x")
	f.Add("dir/", "", uint8(3), "")
	f.Add("./.", "", uint8(0), "")
	f.Fuzz(func(t *testing.T, name, body string, kind uint8, link string) {
		typ := []byte{tar.TypeReg, tar.TypeSymlink, tar.TypeLink, tar.TypeDir}[int(kind)%4]
		var buf bytes.Buffer
		e := entry{name: name, body: body, typ: typ, link: link}
		// Names the tar writer refuses are not interesting: Extract never sees them.
		func() {
			defer func() { _ = recover() }()
			buf.Write(tarGzNoFail(e))
		}()
		if buf.Len() == 0 {
			return
		}
		for _, input := range [][]byte{buf.Bytes(), append(buf.Bytes()[:len(buf.Bytes())/2:len(buf.Bytes())/2], body...)} {
			a, err := Extract(input, 4, 64)
			if err != nil {
				continue
			}
			if typ == tar.TypeSymlink || typ == tar.TypeLink {
				t.Fatalf("link %q -> %q was accepted", name, link)
			}
			if strings.HasPrefix(name, "/") || slices.Contains(strings.Split(name, "/"), "..") {
				t.Fatalf("entry %q was accepted", name)
			}
			if a.Files > 4 || a.Bytes > 64 {
				t.Fatalf("limits exceeded: %d files, %d bytes", a.Files, a.Bytes)
			}
			err = a.FS.Walk("/", func(p string, _ os.FileInfo, err error) error {
				if err != nil {
					return err
				}
				if !strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.Contains(p, "/../") {
					t.Fatalf("held path %q is not a clean absolute path inside the root", p)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("walking the result: %v", err)
			}
		}
	})
}

// tarGzNoFail is tarGz for the fuzzer, which must not fail the test on names tar refuses.
func tarGzNoFail(e entry) []byte {
	return tarGz(panicTB{}, e)
}

// panicTB turns tarGz's t.Fatal into a panic the fuzzer recovers from.
type panicTB struct{ testing.TB }

func (panicTB) Helper()               {}
func (panicTB) Fatal(args ...any)     { panic(args) }
func (panicTB) Fatalf(string, ...any) { panic("tar") }
