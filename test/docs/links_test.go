package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tidegate/tidegate/test/testenv"
)

var (
	// link is a Markdown inline link's target: [text](target).
	link = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// code is an inline code span, whose text is no link.
	code = regexp.MustCompile("`[^`]*`")
	// htmlAnchor is an anchor set by hand: <a id="name"></a>.
	htmlAnchor = regexp.MustCompile(`<a id="([^"]+)">`)
)

// documents are the README and every Markdown file under docs/, relative to the repository root.
func documents(t *testing.T) []string {
	t.Helper()
	docs := []string{"README.md"}
	root := testenv.RepoRoot()
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			docs = append(docs, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// lines returns the lines of the repository file name outside fenced code blocks, where a link is
// text for the reader to see, not a link.
func lines(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.RepoRoot(), name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	fenced := false
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		l := s.Text()
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, l)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// anchors are the GitHub anchors of a document's headings, and those its <a id> tags set.
func anchors(t *testing.T, name string) map[string]bool {
	t.Helper()
	a := map[string]bool{}
	for _, l := range lines(t, name) {
		if strings.HasPrefix(l, "#") {
			a[slug(strings.TrimSpace(strings.TrimLeft(l, "#")))] = true
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			a[m[1]] = true
		}
	}
	return a
}

// slug is the anchor GitHub gives a heading: lower case, spaces to hyphens, and every character
// but letters, digits, hyphens and underscores dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Every relative link in the README and the documents under docs/ names a file or directory that
// exists, and a heading of it when it names one.
func TestRelativeLinksResolve(t *testing.T) {
	root := testenv.RepoRoot()
	for _, doc := range documents(t) {
		for _, l := range lines(t, doc) {
			for _, m := range link.FindAllStringSubmatch(code.ReplaceAllString(l, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				path := doc
				if file != "" {
					path = filepath.ToSlash(filepath.Join(filepath.Dir(doc), file))
				}
				st, err := os.Stat(filepath.Join(root, path))
				if err != nil {
					t.Errorf("%s links %s: %s does not exist", doc, target, path)
					continue
				}
				if anchor != "" && !st.IsDir() && strings.HasSuffix(path, ".md") && !anchors(t, path)[anchor] {
					t.Errorf("%s links %s: %s has no heading #%s", doc, target, path, anchor)
				}
			}
		}
	}
}

// docs/README.md lists every document under docs/, so that none is found only by chance.
func TestTheIndexListsEveryDocument(t *testing.T) {
	index := strings.Join(lines(t, "docs/README.md"), "\n")
	for _, doc := range documents(t) {
		rel := strings.TrimPrefix(doc, "docs/")
		if doc == "README.md" || rel == "README.md" {
			continue
		}
		if !strings.Contains(index, "]("+rel+")") {
			t.Errorf("docs/README.md does not link %s", rel)
		}
	}
}
