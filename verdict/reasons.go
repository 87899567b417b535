package verdict

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"cuelang.org/go/cue/errors"
)

// disjunctionHeader is the message CUE puts before the errors of each disjunct.
var disjunctionHeader = regexp.MustCompile(`^\d+ errors in empty disjunction:?$`)

// maxReasonBytes bounds one reason: CUE quotes whole values in some messages.
const maxReasonBytes = 512

// reasons formats validation errors as "path: message", each followed by what the list elements
// on its path are in the evidence ("(clusters.3: member-4)"), so that a reason names the cluster
// or object without a reader counting list entries. Sorted and de-duplicated.
func reasons(err error, doc any) []string {
	var out []string
	for _, e := range errors.Errors(err) {
		p := e.Path()
		s := message(e)
		if disjunctionHeader.MatchString(s) {
			// The disjuncts' own errors follow, one each, with the same path.
			continue
		}
		if len(p) > 0 {
			s = strings.Join(p, ".") + ": " + s
			if len(p) > 1 {
				if n := describe(doc, p[1:]); n != "" {
					s += " (" + n + ")"
				}
			}
		}
		out = append(out, truncate(s, maxReasonBytes))
	}
	return sortUnique(out)
}

// message is a CUE error's message without its path and positions, on one line.
func message(e errors.Error) string {
	format, args := e.Msg()
	return strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " ")
}

// describe names the list elements along path in the evidence: an element with a name (and a
// kind) by them, a string element by its value.
func describe(doc any, path []string) string {
	var notes []string
	walkJSON(doc, path, func(key string, elem any) {
		if n := nameOf(elem); n != "" {
			notes = append(notes, key+": "+n)
		}
	})
	return strings.Join(notes, "; ")
}

func nameOf(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(truncate(v, 160))
	case map[string]any:
		name, _ := v["name"].(string)
		if name == "" {
			return ""
		}
		if ns, _ := v["namespace"].(string); ns != "" {
			name = ns + "/" + name
		}
		if kind, _ := v["kind"].(string); kind != "" {
			name = kind + " " + name
		}
		if field, _ := v["field"].(string); field != "" {
			name += " " + field
		}
		return name
	}
	return ""
}

// ReasonPath is the CUE path a reason of gate starts with ("noDisruption.clusters.3.ready: ..."),
// split into its labels without the gate (quoted labels unquoted); nil when the reason names no
// path below the gate (a reason about the gate as a whole, or one the engine wrote).
func ReasonPath(gate, reason string) []string {
	rest, ok := strings.CutPrefix(reason, gate+".")
	if !ok {
		return nil
	}
	var labels []string
	var cur strings.Builder
	quoted := false
	for i := 0; i < len(rest); i++ {
		switch ch := rest[i]; {
		case ch == '"' && (!quoted || rest[i-1] != '\\'):
			quoted = !quoted
			cur.WriteByte(ch)
		case quoted:
			cur.WriteByte(ch)
		case ch == '.':
			labels = append(labels, unquoteLabel(cur.String()))
			cur.Reset()
		case ch == ':':
			return append(labels, unquoteLabel(cur.String()))
		default:
			cur.WriteByte(ch)
		}
	}
	return nil // no "path: message" form
}

func unquoteLabel(l string) string {
	if u, err := strconv.Unquote(l); err == nil {
		return u
	}
	return l
}

// EvidenceAt follows path (a CUE path below the gate, as ReasonPath returns it) through doc, a
// decoded evidence document: the value there and whether the path leads to one (a hidden field
// of the policy, such as _budget, is not in the evidence), and what the list elements along the
// path are ("clusters.3: member-4"), as a reason names them.
func EvidenceAt(doc any, path []string) (value any, found bool, about string) {
	value, found = walkJSON(doc, path, nil)
	return value, found, describe(doc, path)
}

// lookupJSON follows a CUE path through a decoded JSON document; nil when the path leads nowhere.
func lookupJSON(doc any, path []string) any {
	v, _ := walkJSON(doc, path, nil)
	return v
}

// walkJSON follows a CUE path through a decoded JSON document, calling onElem for every list
// element it passes ("clusters.3" and the element). It returns where it ended and whether the
// whole path was found.
func walkJSON(doc any, path []string, onElem func(key string, elem any)) (any, bool) {
	cur := doc
	for i, label := range path {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[label]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			idx, err := strconv.Atoi(label)
			if err != nil || idx < 0 || idx >= len(c) {
				return nil, false
			}
			cur = c[idx]
			if onElem != nil {
				key := label
				if i > 0 {
					key = path[i-1] + "." + label
				}
				onElem(key, cur)
			}
		default:
			return nil, false
		}
	}
	return cur, true
}

// CapReasons returns at most n reasons for a condition message, the last one saying how many
// were left out; a receipt keeps them all.
func CapReasons(reasons []string, n int) []string {
	if n < 1 {
		n = 1
	}
	if len(reasons) <= n {
		return append([]string(nil), reasons...)
	}
	out := append([]string(nil), reasons[:n-1]...)
	return append(out, fmt.Sprintf("and %d more", len(reasons)-(n-1)))
}

// sortUnique sorts in natural order (clusters.2 before clusters.10) and drops duplicates.
func sortUnique(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := append([]string(nil), s...)
	sort.Slice(out, func(i, j int) bool { return naturalLess(out[i], out[j]) })
	w := 1
	for i := 1; i < len(out); i++ {
		if out[i] != out[w-1] {
			out[w] = out[i]
			w++
		}
	}
	return out[:w]
}

// naturalLess compares strings with runs of digits compared as numbers.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			if da != db {
				return da < db
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digits(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut at a rune boundary.
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
