// Package boundedrender renders tenants' packages (evidence.Render, and Helm charts with
// chart.Render) in a child process under a time and memory budget, so that no package can stop the
// controller that renders it.
//
// A kustomize build cannot be cancelled and its memory cannot be capped in-process: a package
// whose configMapGenerator names one large file under many keys builds a ConfigMap as large as
// their sum, and a build runs until it is done. So the controller renders each package in a worker
// of kind "render" (internal/worker, the mechanism the policy worker uses too): the running
// executable started again, which this package's init turns into a worker before main (or a test
// binary's TestMain) runs. The artifact's files and the build spec go to the worker; the built
// objects and kustomize's output, or kustomize's error, come back. A chart's templates are no
// cheaper to bound (a template can range over a large value, or call itself), so a chart renders
// in the same worker: the archive, the HelmRelease and the values go to it, the release's objects,
// CRDs and hooks, or Helm's error, come back. Past the budget the caller gets
// a *worker.BudgetError, and the controller carries on.
package boundedrender

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tidegate/tidegate/evidence"
	"github.com/tidegate/tidegate/evidence/chart"
	"github.com/tidegate/tidegate/evidence/decrypt"
	"github.com/tidegate/tidegate/internal/worker"
)

// DefaultBudget is the budget of the controller's flags' defaults: 30 s and 256 MiB. A package of
// a few hundred objects renders in well under a second and 64 MiB, the worker's start included;
// the time leaves room for a busy machine and a large package, and the memory, like the policy
// budget's, keeps four workers at once within the shipped manager's 1 GiB limit with the manager's
// own.
var DefaultBudget = worker.Budget{Time: 30 * time.Second, Memory: 256 << 20}

// MaxOutput bounds what a render may return: its objects and kustomize's output together. A
// build larger than that is over the render budget.
const MaxOutput = 64 << 20

// kind is the render worker's. A request holds the artifact's files, at most the 256 MiB the
// collector extracts, encoded.
var kind = &worker.Kind{
	Name:        "render",
	Flags:       "--render-time-budget, --render-memory-budget",
	Advice:      "make the package cheaper to build (fewer and smaller generated objects, no file generated under many keys)",
	MaxRequest:  512 << 20,
	MaxResponse: MaxOutput,
}

// Renderer renders packages in worker processes under Budget.
type Renderer struct {
	Budget worker.Budget
	// Executable is the worker binary; empty is the running executable (os.Executable).
	Executable string
}

// header is the first value of a request; the artifact's files follow it, one entry each. The
// decryption keys go to the worker on its standard input, as the artifact does, never on its
// command line or in its environment.
type header struct {
	Spec    kustomizev1.KustomizationSpec `json:"spec"`
	Skipped []string                      `json:"skipped,omitempty"`
	Keys    *keys                         `json:"keys,omitempty"`
	// Chart, when set, asks for a chart render (RenderChart): one entry, the chart archive, follows.
	Chart *chartRequest `json:"chart,omitempty"`
}

// keys are evidence.Keys on the way to a worker.
type keys struct {
	Secret string            `json:"secret"`
	Data   map[string][]byte `json:"data"`
}

type entry struct {
	Path string `json:"path"`
	Dir  bool   `json:"dir,omitempty"`
	Data []byte `json:"data,omitempty"`
}

type response struct {
	// Objects and Manifests are the build's (evidence.Rebuilt).
	Objects   []json.RawMessage `json:"objects,omitempty"`
	Manifests string            `json:"manifests,omitempty"`
	// Secrets are the values the render decrypted (evidence.Rendered.Secrets).
	Secrets []string `json:"secrets,omitempty"`
	// Error is kustomize's: the package does not build; Decryption says it is an
	// *evidence.DecryptionError.
	Error      string `json:"error,omitempty"`
	Decryption bool   `json:"decryption,omitempty"`
	// Chart is a chart render's result (RenderChart).
	Chart *chart.Rendered `json:"chart,omitempty"`
}

// Render builds art for a Kustomization with spec, decrypting with k, in a worker, as
// decrypt.Render does in-process; op names the render in errors ("rendering the candidate"). A
// package that does not build comes back as renderErr, the error decrypt.Render returns (an
// *evidence.DecryptionError for keys that do not decrypt it), which is a finding about the
// package. err says the render did not finish: a *worker.BudgetError past the budget, else the
// worker's failure.
func (r *Renderer) Render(ctx context.Context, op string, art *evidence.Artifact, spec kustomizev1.KustomizationSpec, k *evidence.Keys) (build *evidence.Rendered, renderErr, err error) {
	h := header{Spec: spec, Skipped: art.Skipped}
	if k != nil {
		h.Keys = &keys{Secret: k.Secret, Data: k.Data}
	}
	send := func(w io.Writer) error {
		enc := json.NewEncoder(w)
		if err := enc.Encode(h); err != nil {
			return err
		}
		return art.FS.Walk("/", func(p string, info os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			if info.IsDir() {
				return enc.Encode(entry{Path: p, Dir: true})
			}
			data, err := art.FS.ReadFile(p)
			if err != nil {
				return err
			}
			return enc.Encode(entry{Path: p, Data: data})
		})
	}
	var res response
	if err := kind.Run(ctx, r.Executable, op, r.Budget, send, &res); err != nil {
		return nil, nil, err
	}
	if res.Decryption {
		return nil, evidence.NewDecryptionError(res.Error), nil
	}
	if res.Error != "" {
		return nil, errors.New(res.Error), nil
	}
	objs := make([]*unstructured.Unstructured, 0, len(res.Objects))
	for _, raw := range res.Objects {
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil {
			return nil, nil, fmt.Errorf("%s: reading the render worker's objects: %w", op, err)
		}
		objs = append(objs, obj)
	}
	return evidence.Rebuilt(spec, objs, []byte(res.Manifests), res.Secrets), nil, nil
}

func init() {
	kind.Serve(serve)
}

// serve is a worker: it reads an artifact and a spec from r, renders, and writes the build or
// kustomize's error to w; a request for a chart render is served by serveChart.
func serve(r io.Reader, w io.Writer) error {
	dec := json.NewDecoder(r)
	var h header
	if err := dec.Decode(&h); err != nil {
		return fmt.Errorf("reading the request: %w", err)
	}
	if h.Chart != nil {
		return serveChart(dec, h.Chart, w)
	}
	art := &evidence.Artifact{FS: filesys.MakeFsInMemory(), Skipped: h.Skipped}
	for {
		var e entry
		err := dec.Decode(&e)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the request: %w", err)
		}
		p := path.Clean("/" + e.Path)
		if e.Dir {
			err = art.FS.MkdirAll(p)
		} else {
			err = art.FS.WriteFile(p, e.Data)
		}
		if err != nil {
			return fmt.Errorf("reading the request: %s: %w", p, err)
		}
	}
	var res response
	var k *evidence.Keys
	if h.Keys != nil {
		k = &evidence.Keys{Secret: h.Keys.Secret, Data: h.Keys.Data}
	}
	build, err := decrypt.Render(art, h.Spec, k)
	if err != nil {
		var de *evidence.DecryptionError
		res.Error, res.Decryption = err.Error(), errors.As(err, &de)
		return json.NewEncoder(w).Encode(res)
	}
	res.Manifests, res.Secrets = string(build.Manifests()), build.Secrets()
	res.Objects = make([]json.RawMessage, 0, len(build.Objects))
	for _, o := range build.Objects {
		raw, err := o.MarshalJSON()
		if err != nil {
			return fmt.Errorf("encoding %s: %w", evidence.RefOf(o), err)
		}
		res.Objects = append(res.Objects, raw)
	}
	return json.NewEncoder(w).Encode(res)
}
