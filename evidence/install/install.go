// Package install checks a package's install-time values against the install-time schema the
// package ships, and reports the result as the install half of the deploySafe gate's evidence
// (verdict.InstallEvidence).
//
// Most of a package's settings are fixed when the package is built; only a small surface is open
// at install time. The rollout and the clusters give install-time values as Flux postBuild
// substitutions, a map from variable name to string value. The package declares that surface in
// the file tidegate/install.cue of its kustomize directory (SchemaPath), for example:
//
//	package install
//
//	// values are the install-time values the package accepts, each a CUE constraint on a
//	// string (postBuild substitutions are strings). Optional fields (?) may be left out;
//	// required ones (no ?, or !) must be given.
//	values: {
//		replicas?: =~"^[0-9]+$"
//		region:    "eu" | "us"
//		logLevel?: *"info" | "debug" | "info" | "warn"
//		[=~"^feature_"]: "on" | "off"
//	}
//
//	// protected lists settings the package fixes at build time: setting one at install
//	// time is refused.
//	protected: ["image", "namespace"]
//
// The file is one CUE file, at most MaxSchemaBytes long, with any package name (or none) and
// imports of CUE's builtin packages only (strings, list, ...). Its regular fields are exactly
// these two, both optional:
//
//   - values: a struct. Each of its fields declares one install-time value, named by the field's
//     label (quote labels that are not CUE identifiers: "log-level"?: string), and constrains it:
//     the constraint must admit a string. A field is optional (label?) or required (a regular
//     field, or label!). A pattern constraint ([=~"^feature_"]: "on" | "off") declares every
//     value whose name it matches, and a `...` declares every name. Definitions (#X) and hidden
//     fields (_x) are helpers and declare nothing. The struct must evaluate without error
//     when no value is given; a validator on the struct as a whole (matchN, struct.MaxFields,
//     ...) is applied to the values given. A missing values declares nothing.
//   - protected: a list of strings, the names of values the package fixes at build time. A name
//     may not be both protected and a field of values; a protected name that a pattern of values
//     matches is protected. A missing protected protects nothing.
//
// Any other regular field, or either field of the wrong shape, makes the schema invalid.
//
// Check reports, for the given values:
//
//   - ProtectedKeys: the names that are protected.
//   - UnknownKeys: the names neither protected nor declared by values. Whether values declares a
//     name is decided as the schema stands with no value given (as if values were closed).
//   - Violations, "<name>: <CUE error>" (the error's messages on one line, without positions, at
//     most 512 bytes): each declared value whose string does not satisfy its constraint (all the
//     values given are unified with values at once, so that the constraints of the field, of the
//     patterns its name matches and of the struct as a whole all apply);
//     "<name>: required install-time value is missing": each required field of values, with the
//     values given, that is not given, where a regular field is satisfied by a default or a
//     concrete value but a field marked ! is not (as in CUE, it must be given explicitly);
//     "values: <CUE error>": a violation of a validator on the struct as a whole.
//
// Every list is sorted and free of duplicates.
//
// Check is pure and fast: it reads no file and no cluster, evaluates the schema in a fresh CUE
// context each call, and never puts a value into CUE source (values are filled in as Go
// strings, so any characters, quotes and ${...} included, are taken literally).
package install

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
	"cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/token"

	"github.com/tidegate/tidegate/verdict"
)

// SchemaPath is where a package ships its install-time schema, relative to its kustomize
// directory. Errors about the schema name it.
const SchemaPath = "tidegate/install.cue"

// MaxSchemaBytes bounds the size of the schema file.
const MaxSchemaBytes = 256 << 10

const (
	// maxMessage bounds one violation's CUE error message, in bytes (it quotes the value).
	maxMessage = 512
	// maxSchemaErrors bounds how many CUE errors a schema error lists.
	maxSchemaErrors = 10
)

// Check checks values against the schema file's content. schema nil means the package ships no
// schema: Schema false, nothing is checked, every list empty. An empty, non-nil schema is a schema
// that declares nothing.
//
// The error is only for a schema that does not compile or does not have the shape described in
// the package documentation; it starts with SchemaPath and gives the lines and columns of the
// problems. With an error the evidence is InstallEvidence{Schema: true}: the package ships a
// schema, but nothing could be checked against it.
func Check(schema []byte, values map[string]string) (verdict.InstallEvidence, error) {
	evs, err := CheckEach(schema, []map[string]string{values})
	return evs[0], err
}

// CheckEach checks each of several sets of values against one schema, as Check does, compiling the
// schema once: the values of the targets of a wave. The evidence is in the order of values.
func CheckEach(schema []byte, values []map[string]string) (evs []verdict.InstallEvidence, err error) {
	evs = make([]verdict.InstallEvidence, len(values))
	if schema == nil {
		return evs, nil
	}
	for i := range evs {
		evs[i].Schema = true
	}
	if len(schema) > MaxSchemaBytes {
		return evs, fmt.Errorf("%s: the schema is %d bytes, more than the %d allowed", SchemaPath, len(schema), MaxSchemaBytes)
	}
	defer func() {
		if r := recover(); r != nil {
			for i := range evs {
				evs[i] = verdict.InstallEvidence{Schema: true}
			}
			err = fmt.Errorf("%s: internal error evaluating the schema: %v", SchemaPath, r)
		}
	}()
	s, err := compile(schema)
	if err != nil {
		return evs, err
	}
	for i, v := range values {
		evs[i] = s.check(v)
	}
	return evs, nil
}

// installSchema is a compiled schema.
type installSchema struct {
	// values is the values struct as written; closed is it closed, so that Allows says which
	// names it declares.
	values, closed cue.Value
	// protected are the protected names.
	protected map[string]bool
}

func compile(src []byte) (*installSchema, error) {
	ctx := cuecontext.New()
	root := ctx.CompileBytes(src, cue.Filename(SchemaPath))
	if err := root.Err(); err != nil {
		return nil, schemaError(err)
	}
	if k := root.IncompleteKind(); k != cue.StructKind {
		return nil, shapeError(root, "the file must be a struct with the fields values and protected, is %v", k)
	}
	top, err := root.Fields(cue.Optional(true))
	if err != nil {
		return nil, schemaError(err)
	}
	for top.Next() {
		sel := top.Selector()
		switch name := sel.Unquoted(); {
		case name != "values" && name != "protected":
			return nil, shapeError(top.Value(), "%s: unknown field: the schema has only the fields values and protected", sel)
		case sel.ConstraintType() != 0:
			return nil, shapeError(top.Value(), "%s: must be a regular field (no ? or !)", sel)
		}
	}

	s := &installSchema{protected: map[string]bool{}}
	fields := map[string]cue.Value{}
	s.values = root.LookupPath(cue.MakePath(cue.Str("values")))
	if !s.values.Exists() {
		s.values = ctx.CompileString("{}")
	} else {
		if err := s.values.Err(); err != nil {
			return nil, fmt.Errorf("%s: values must evaluate without error when no install-time value is given: %s", SchemaPath, problems(err))
		}
		if k := s.values.IncompleteKind(); k != cue.StructKind {
			return nil, shapeError(s.values, "values: must be a struct of constraints on strings, is %v", k)
		}
		it, err := s.values.Fields(cue.Optional(true))
		if err != nil {
			return nil, shapeError(s.values, "values: must be a single struct: %s", shortMessage(err))
		}
		for it.Next() {
			sel, v := it.Selector(), it.Value()
			if err := v.Err(); err != nil {
				return nil, schemaError(err)
			}
			if k := v.IncompleteKind(); k&cue.StringKind == 0 {
				return nil, shapeError(v, "values.%s: must admit a string (postBuild substitutions are strings), admits %v", cue.Str(sel.Unquoted()), k)
			}
			fields[sel.Unquoted()] = v
		}
	}
	def := cue.MakePath(cue.Def("#values"))
	s.closed = ctx.CompileString("#values: _").FillPath(def, s.values).LookupPath(def)
	if err := s.closed.Err(); err != nil {
		return nil, schemaError(err)
	}

	if p := root.LookupPath(cue.MakePath(cue.Str("protected"))); p.Exists() {
		if k := p.IncompleteKind(); k != cue.ListKind {
			return nil, shapeError(p, "protected: must be a list of strings, is %v", k)
		}
		l, err := p.List()
		if err != nil {
			return nil, schemaError(err)
		}
		for i := 0; l.Next(); i++ {
			name, err := l.Value().String()
			if err != nil {
				return nil, shapeError(l.Value(), "protected.%d: must be a string: %s", i, shortMessage(err))
			}
			if v, ok := fields[name]; ok {
				return nil, shapeError(v, "values.%s: %q is also protected: a value cannot be both open at install time and fixed at build time", cue.Str(name), name)
			}
			s.protected[name] = true
		}
	}
	return s, nil
}

func (s *installSchema) check(values map[string]string) verdict.InstallEvidence {
	ev := verdict.InstallEvidence{Schema: true}
	declared := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(values)) {
		switch {
		case s.protected[k]:
			ev.ProtectedKeys = append(ev.ProtectedKeys, k)
		case !s.closed.Allows(cue.Str(k)):
			ev.UnknownKeys = append(ev.UnknownKeys, k)
		default:
			declared[k] = values[k]
		}
	}

	// The declared values are filled in at once, as Go strings: unification applies the field's
	// constraint, or the constraints of the patterns its name matches, and any constraint of the
	// struct as a whole.
	filled := s.values
	if len(declared) > 0 {
		filled = s.values.FillPath(cue.Path{}, declared)
	}
	for _, k := range slices.Sorted(maps.Keys(declared)) {
		v := filled.LookupPath(cue.MakePath(cue.Str(k)))
		if err := v.Validate(cue.Concrete(true)); err != nil {
			ev.Violations = append(ev.Violations, k+": "+shortMessage(err))
		}
	}
	// The required fields are those of the filled struct, so that a field a comprehension makes
	// required once a value is given counts.
	it, err := filled.Fields(cue.Optional(true))
	if err != nil {
		ev.Violations = append(ev.Violations, "values: "+shortMessage(err))
	}
	for it != nil && it.Next() {
		sel, v := it.Selector(), it.Value()
		k := sel.Unquoted()
		if _, given := declared[k]; given || sel.ConstraintType() == cue.OptionalConstraint {
			continue
		}
		if sel.ConstraintType() != cue.RequiredConstraint {
			// A regular field: satisfied by its default or a concrete value.
			if err := v.Err(); err != nil {
				ev.Violations = append(ev.Violations, k+": "+shortMessage(err))
				continue
			}
			if d, _ := v.Default(); d.Validate(cue.Concrete(true)) == nil {
				continue
			}
		}
		ev.Violations = append(ev.Violations, k+": required install-time value is missing")
	}
	// What is wrong with the struct as a whole (a validator on it): reported under "values".
	// Anything else wrong that no field accounts for fails closed the same way.
	if err := filled.Err(); err != nil {
		depth := len(filled.Path().Selectors())
		var whole []errors.Error
		for _, e := range errors.Errors(err) {
			if len(e.Path()) <= depth {
				whole = append(whole, e)
			}
		}
		switch {
		case len(whole) > 0:
			ev.Violations = append(ev.Violations, "values: "+shortMessage(errorList(whole)))
		case len(ev.Violations) == 0:
			ev.Violations = append(ev.Violations, "values: "+shortMessage(err))
		}
	}

	ev.ProtectedKeys = sortUnique(ev.ProtectedKeys)
	ev.UnknownKeys = sortUnique(ev.UnknownKeys)
	ev.Violations = sortUnique(ev.Violations)
	return ev
}

// errorList turns a list of CUE errors back into one error.
func errorList(es []errors.Error) errors.Error {
	var err errors.Error
	for _, e := range es {
		err = errors.Append(err, e)
	}
	return err
}

// shortMessage is the messages of err, without paths or positions, on one line, bounded.
func shortMessage(err error) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, e := range errors.Errors(err) {
		m := message(e)
		if seen[m] {
			continue
		}
		seen[m] = true
		if b.Len() > 0 {
			if strings.HasSuffix(b.String(), ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(m)
	}
	return verdict.Truncate(b.String(), maxMessage)
}

func message(e errors.Error) string {
	format, args := e.Msg()
	return strings.Join(strings.Fields(fmt.Sprintf(format, args...)), " ")
}

// schemaError is err, a CUE error in the schema, with its paths and positions.
func schemaError(err error) error {
	return fmt.Errorf("%s: %s", SchemaPath, problems(err))
}

// problems lists the CUE errors in err, each with its path and positions.
func problems(err error) string {
	var parts []string
	seen := map[string]bool{}
	for _, e := range errors.Errors(err) {
		p := message(e)
		if path := e.Path(); len(path) > 0 {
			p = strings.Join(path, ".") + ": " + p
		}
		p += at(errors.Positions(e)...)
		if !seen[p] {
			seen[p] = true
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		parts = append(parts, err.Error())
	}
	if n := len(parts) - maxSchemaErrors; n > 0 {
		parts = append(parts[:maxSchemaErrors], fmt.Sprintf("and %d more errors", n))
	}
	return strings.Join(parts, "; ")
}

// shapeError is a schema of the wrong shape, at v.
func shapeError(v cue.Value, format string, args ...any) error {
	return fmt.Errorf("%s: %s%s", SchemaPath, fmt.Sprintf(format, args...), at(v.Pos()))
}

// at is " (line L, column C)" for the positions in the schema file, "" for none.
func at(ps ...token.Pos) string {
	var where []string
	for _, p := range ps {
		if p.IsValid() && p.Filename() == SchemaPath {
			where = append(where, fmt.Sprintf("line %d, column %d", p.Line(), p.Column()))
		}
	}
	where = slices.Compact(where)
	if len(where) == 0 {
		return ""
	}
	return " (" + strings.Join(where, "; ") + ")"
}

func sortUnique(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Compact(s)
}
