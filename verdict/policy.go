package verdict

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strconv"
	"strings"
	"sync"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/ast"
	"cuelang.org/go/cue/build"
	"cuelang.org/go/cue/errors"
	"cuelang.org/go/cue/parser"

	"github.com/tidegate/tidegate/api/v1alpha1"
)

// The confidence gates, as they are named in policies, evidence and receipts: the registry's
// (v1alpha1.Gates).
const (
	GateDeploySafe       = v1alpha1.GateDeploySafe
	GateNoDisruption     = v1alpha1.GateNoDisruption
	GateRollbackSafe     = v1alpha1.GateRollbackSafe
	GateRollbackSucceeds = v1alpha1.GateRollbackSucceeds
)

// Gates lists the gates in the order a wave meets them: the registry, v1alpha1.Gates.
var Gates = v1alpha1.Gates

// schemaOf names each gate's evidence definition, by the gate's name in the registry
// (v1alpha1.Gates); TestEveryGateHasASchema fails for a gate without one.
var schemaOf = map[string]string{
	GateDeploySafe:       "#DeploySafeEvidence",
	GateNoDisruption:     "#NoDisruptionEvidence",
	GateRollbackSafe:     "#RollbackSafeEvidence",
	GateRollbackSucceeds: "#RollbackSucceedsEvidence",
}

const (
	settingsField = "settings"
	settingsDef   = "#Settings"
	// schemaFilePrefix names the schema files inside a compiled policy, so that CUE positions
	// in errors say which side of the contract a problem is on.
	schemaFilePrefix = "tidegate:schema/"
	// MaxPolicyBytes bounds the total size of a policy's files.
	MaxPolicyBytes = 1 << 20
)

// Policy is a CUE policy ready to decide gates: its source files, checked once when loaded.
// It holds no CUE values, so one Policy may be used by many goroutines at once.
type Policy struct {
	files  []policyFile // sorted by name
	digest string
}

type policyFile struct {
	name string
	src  []byte
}

// Digest identifies the policy in receipts: "sha256:<hex>" over its sorted file names and contents,
// or "builtin:sha256:<hex>" for the built-in default policy.
func (p *Policy) Digest() string { return p.digest }

// Sources returns a copy of the policy's files, by name: what LoadPolicy loads it from again.
func (p *Policy) Sources() map[string][]byte {
	out := make(map[string][]byte, len(p.files))
	for _, f := range p.files {
		out[f.name] = append([]byte(nil), f.src...)
	}
	return out
}

// Builtin tells whether p is the built-in default policy (DefaultPolicy).
func (p *Policy) Builtin() bool { return strings.HasPrefix(p.digest, "builtin:") }

// Files returns the policy's file names, sorted.
func (p *Policy) Files() []string {
	names := make([]string, len(p.files))
	for i, f := range p.files {
		names[i] = f.name
	}
	return names
}

// PolicyError says why a policy cannot decide gates. A rollout whose policy is invalid stalls:
// no gate passes until the policy is fixed.
type PolicyError struct {
	// Digest of the policy, when its files could be read.
	Digest string
	// Problems are CUE errors with their paths and positions, sorted and de-duplicated.
	Problems []string
}

func (e *PolicyError) Error() string {
	return "invalid policy: " + strings.Join(CapReasons(e.Problems, 10), "; ")
}

// LoadPolicy checks a policy given as its CUE files by base name (every file of one package,
// e.g. the *.cue files of a directory) and returns it ready to evaluate. It returns a
// *PolicyError when the files do not compile together with the evidence schemas, when a gate
// is missing or is not a struct, when a gate constrains a field its evidence schema does not
// have (or constrains one incompatibly), when a top-level field is neither a gate nor settings,
// or when the settings are not concrete.
func LoadPolicy(files map[string][]byte) (*Policy, error) {
	p, err := newPolicy(files, "sha256:")
	if err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	return p, nil
}

var (
	defaultOnce   sync.Once
	defaultPolicy *Policy
)

// DefaultPolicy returns the built-in policy (verdict/policy/default.cue) for rollouts that name none.
func DefaultPolicy() *Policy {
	defaultOnce.Do(func() {
		p, err := newPolicy(embeddedFiles(defaultPolicyFS, "policy"), "builtin:sha256:")
		if err == nil {
			err = p.check()
		}
		if err != nil {
			// The default policy is compiled and checked by this package's tests.
			panic("cue: the built-in default policy is invalid: " + err.Error())
		}
		defaultPolicy = p
	})
	return defaultPolicy
}

func newPolicy(files map[string][]byte, digestPrefix string) (*Policy, error) {
	if len(files) == 0 {
		return nil, &PolicyError{Problems: []string{"the policy has no .cue files"}}
	}
	p := &Policy{}
	h := sha256.New()
	total := 0
	var problems []string
	for _, name := range sortedNames(files) {
		src := files[name]
		total += len(src)
		if name != path.Base(name) || path.Ext(name) != ".cue" || strings.HasPrefix(name, ".") {
			problems = append(problems, fmt.Sprintf("%s: a policy file is a .cue file named by its base name", name))
		}
		// Lengths make the encoding unambiguous: no two file sets hash the same bytes.
		fmt.Fprintf(h, "%d:%s%d:", len(name), name, len(src))
		h.Write(src)
		// A copy: the caller's map may change after the policy is loaded and checked.
		p.files = append(p.files, policyFile{name: name, src: append([]byte(nil), src...)})
	}
	p.digest = digestPrefix + hex.EncodeToString(h.Sum(nil))
	if total > MaxPolicyBytes {
		problems = append(problems, fmt.Sprintf("the policy is %d bytes, more than %d", total, MaxPolicyBytes))
	}
	if len(problems) > 0 {
		return nil, &PolicyError{Digest: p.digest, Problems: problems}
	}
	return p, nil
}

var schemaSources = sync.OnceValue(func() []policyFile {
	files := SchemaFiles()
	out := make([]policyFile, 0, len(files))
	for _, n := range sortedNames(files) {
		out = append(out, policyFile{name: schemaFilePrefix + n, src: files[n]})
	}
	return out
})

// build compiles the policy together with the evidence schemas into ctx. With a binding it also
// compiles, as one more file of the package, the gate's evidence unified with its schema and the
// settings with #Settings, so that the whole decision is one evaluation (unifying values after
// the fact would evaluate the package again for each of them).
//
// ASTs are parsed anew for every build: compiling resolves identifiers in place, so an AST must
// not be shared between contexts that may be used concurrently.
//
// The error is an instance error (parse, package, imports); value errors are left to the caller,
// which has to tell the policy's from the evidence's.
func (p *Policy) build(ctx *cue.Context, bind *binding) (cue.Value, error) {
	inst := build.NewContext().NewInstance("", nil)
	var errs errors.Error
	pkg := ""
	for _, f := range p.files {
		file, err := parser.ParseFile(f.name, f.src)
		if err != nil {
			errs = errors.Append(errs, errors.Promote(err, "parse"))
			continue
		}
		name := file.PackageName()
		if name == "" {
			errs = errors.Append(errs, errors.Newf(file.Pos(), "%s: a policy file needs a package clause (package policy)", f.name))
			continue
		}
		if pkg == "" {
			pkg = name
		}
		for spec := range file.ImportSpecs() {
			ip, err := strconv.Unquote(spec.Path.Value)
			if err != nil || strings.Contains(strings.Split(ip, "/")[0], ".") || strings.HasPrefix(ip, "tool/") {
				errs = errors.Append(errs, errors.Newf(spec.Pos(), "import %s: a policy may import only CUE's standard library", spec.Path.Value))
			}
		}
		if bind != nil && declares(file, bind.gate) {
			bind.declared = true
		}
		if err := inst.AddSyntax(file); err != nil {
			errs = errors.Append(errs, err)
		}
	}
	if errs != nil {
		return cue.Value{}, errs
	}
	for _, f := range schemaSources() {
		file, err := parser.ParseFile(f.name, f.src)
		if err != nil {
			return cue.Value{}, errors.Promote(err, "parse schema")
		}
		renamePackage(file, pkg)
		if err := inst.AddSyntax(file); err != nil {
			return cue.Value{}, err
		}
	}
	if bind != nil {
		if err := inst.AddSyntax(bind.file(pkg)); err != nil {
			return cue.Value{}, err
		}
	}
	if inst.Err != nil {
		return cue.Value{}, inst.Err
	}
	return ctx.BuildInstance(inst), nil
}

// compile builds the policy alone and returns it only when it has no error.
func (p *Policy) compile(ctx *cue.Context) (cue.Value, error) {
	v, err := p.build(ctx, nil)
	if err != nil {
		return cue.Value{}, err
	}
	if err := v.Err(); err != nil {
		return cue.Value{}, err
	}
	return v, nil
}

// binding puts a gate's evidence into a policy package.
type binding struct {
	gate     string
	evidence ast.Expr
	// declared is set by build when a policy file has the gate as a top-level field.
	declared bool
}

// declares reports whether a file has a top-level field with the given name. It is a fast check
// for the common case only: a field made by a comprehension or an embedding is not seen.
func declares(f *ast.File, name string) bool {
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.Field); ok {
			if l, _, err := ast.LabelName(fd.Label); err == nil && l == name {
				return true
			}
		}
	}
	return false
}

func (b *binding) file(pkg string) *ast.File {
	return &ast.File{
		Filename: "tidegate:evidence/" + b.gate + ".cue",
		Decls: []ast.Decl{
			&ast.Package{Name: ast.NewIdent(pkg)},
			&ast.Field{Label: ast.NewIdent(settingsField), Value: ast.NewIdent(settingsDef)},
			&ast.Field{Label: ast.NewIdent(b.gate), Value: ast.NewIdent(schemaOf[b.gate])},
			&ast.Field{Label: ast.NewIdent(b.gate), Value: b.evidence},
		},
	}
}

// renamePackage puts a schema file into the policy's package, so that the policy refers to the
// definitions without an import.
func renamePackage(f *ast.File, pkg string) {
	for _, d := range f.Decls {
		if c, ok := d.(*ast.Package); ok {
			c.Name = ast.NewIdent(pkg)
			return
		}
	}
}

// check is what LoadPolicy (and so `tidegate policy vet`) demands of a policy.
func (p *Policy) check() error {
	ctx := newContext()
	root, err := p.compile(ctx)
	if err != nil {
		return p.policyError(err)
	}
	var problems []string
	known := map[string]bool{settingsField: true}
	for _, g := range Gates {
		known[g] = true
	}
	it, err := root.Fields()
	if err != nil {
		return p.policyError(err)
	}
	for it.Next() {
		if name := it.Selector().String(); !known[name] {
			problems = append(problems, fmt.Sprintf("%s: not a gate (%s) or %s; keep helpers in hidden fields (_%s) or definitions",
				name, strings.Join(Gates, ", "), settingsField, name))
		}
	}
	for _, g := range Gates {
		gv, err := gateField(root, g)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		def := root.LookupPath(cue.ParsePath(schemaOf[g]))
		u := root.FillPath(cue.MakePath(cue.Str(g)), def).LookupPath(cue.MakePath(cue.Str(g)))
		problems = append(problems, problemsOf(u.Validate())...)
		problems = append(problems, fitsSchema(gv, def, g, 0)...)
	}
	if len(problems) == 0 {
		// Evidence that reaches every constraint shows what unifying alone cannot: a constraint
		// left open (a bound against a value nobody sets) makes the policy unable to decide.
		for _, g := range Gates {
			d, err := Evaluate(p, g, ExampleEvidence(g))
			if err != nil {
				var pe *PolicyError
				if errors.As(err, &pe) {
					problems = append(problems, pe.Problems...)
				} else {
					problems = append(problems, err.Error())
				}
				continue
			}
			// The example is a valid contract document: a field it does not have was added by
			// the policy, under a comprehension that only evidence could open.
			for _, r := range d.Reasons {
				if strings.Contains(r, ": field not allowed") {
					problems = append(problems, r+" (found with the example evidence)")
				}
			}
		}
	}
	if _, err := p.Settings(); err != nil {
		var pe *PolicyError
		if errors.As(err, &pe) {
			problems = append(problems, pe.Problems...)
		} else {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return &PolicyError{Digest: p.digest, Problems: sortUnique(problems)}
	}
	return nil
}

// gateField looks a gate's field up in a compiled policy; it must be a struct.
func gateField(root cue.Value, gate string) (cue.Value, error) {
	v := root.LookupPath(cue.MakePath(cue.Str(gate)))
	if !v.Exists() {
		return v, fmt.Errorf("%s: missing; a policy decides every gate (write `%s: %s` to accept any evidence the contract allows)", gate, gate, schemaOf[gate])
	}
	switch k := v.IncompleteKind(); k {
	case cue.StructKind:
		return v, nil
	case cue.BottomKind:
		// A struct whose comprehensions wait for evidence has no kind yet: it is a struct when
		// it unifies with one.
		if err := v.Unify(v.Context().CompileString("{}")).Validate(); err != nil {
			return v, fmt.Errorf("%s: is not a struct that constrains %s: %s", gate, schemaOf[gate], strings.Join(problemsOf(err), "; "))
		}
		return v, nil
	default:
		return v, fmt.Errorf("%s: is %v, not a struct that constrains %s", gate, k, schemaOf[gate])
	}
}

// fitsSchema walks a gate's field and reports what its evidence schema cannot have: a field the
// schema does not allow, or a constraint that cannot unify with the schema's. Unifying alone does
// not tell: constraints on list elements ([...{x: 1}]) and fields added under a comprehension
// that waits for evidence are only checked once evidence arrives.
func fitsSchema(p, s cue.Value, at string, depth int) []string {
	if depth > 32 || !s.Exists() {
		return nil
	}
	var problems []string
	if err := p.Unify(s).Validate(); err != nil {
		for _, e := range errors.Errors(err) {
			where := at
			if path := e.Path(); len(path) > 0 {
				where = strings.ReplaceAll(strings.Join(path, "."), "._", ".[*]")
			}
			problems = append(problems, where+": "+message(e)+positions(e))
		}
		return problems
	}
	if p.IncompleteKind()&cue.StructKind != 0 {
		it, err := p.Fields(cue.Optional(true))
		if err == nil {
			for it.Next() {
				sel := it.Selector()
				if !sel.IsString() {
					continue
				}
				label := at + "." + sel.Unquoted()
				if !s.Allows(sel) {
					problems = append(problems, fmt.Sprintf("%s: field not allowed: the evidence has no such field%s", label, positions(it.Value())))
					continue
				}
				sv := s.LookupPath(cue.MakePath(sel))
				if !sv.Exists() && sel.ConstraintType() == 0 {
					sv = s.LookupPath(cue.MakePath(sel.Optional()))
				}
				problems = append(problems, fitsSchema(it.Value(), sv, label, depth+1)...)
			}
		}
	}
	if p.IncompleteKind()&cue.ListKind != 0 {
		se := s.LookupPath(cue.MakePath(cue.AnyIndex))
		if pe := p.LookupPath(cue.MakePath(cue.AnyIndex)); pe.Exists() {
			problems = append(problems, fitsSchema(pe, se, at+".[*]", depth+1)...)
		}
		if l, err := p.List(); err == nil {
			for i := 0; l.Next(); i++ {
				problems = append(problems, fitsSchema(l.Value(), se, fmt.Sprintf("%s.%d", at, i), depth+1)...)
			}
		}
	}
	return problems
}

// policyError turns CUE errors from compiling or checking a policy into a *PolicyError.
func (p *Policy) policyError(err error) error {
	return &PolicyError{Digest: p.digest, Problems: problemsOf(err)}
}

// problemsOf formats CUE errors as "path: message (file:line:col, ...)", sorted and unique.
func problemsOf(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	for _, e := range errors.Errors(err) {
		s := message(e) + positions(e)
		if p := e.Path(); len(p) > 0 {
			s = strings.Join(p, ".") + ": " + s
		}
		out = append(out, s)
	}
	return sortUnique(out)
}

// positions formats where a CUE error (or value) comes from: " (file:line:col, ...)".
func positions(x any) string {
	var ps []string
	switch x := x.(type) {
	case errors.Error:
		for _, p := range errors.Positions(x) {
			if p.IsValid() {
				ps = append(ps, p.String())
			}
		}
	case cue.Value:
		if p := x.Pos(); p.IsValid() {
			ps = append(ps, p.String())
		}
	}
	if len(ps) == 0 {
		return ""
	}
	return " (" + strings.Join(sortUnique(ps), ", ") + ")"
}
