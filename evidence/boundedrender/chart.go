package boundedrender

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"

	"github.com/tidegate/tidegate/evidence/chart"
)

// chartRequest is the header of a chart render: what chart.Render takes besides the archive.
type chartRequest struct {
	HelmRelease *helmv2.HelmRelease `json:"helmRelease"`
	Values      map[string]any      `json:"values,omitempty"`
	Options     chart.Options       `json:"options"`
}

// RenderChart renders the chart archive for hr with values and opts in a worker, as chart.Render
// does in-process; op names the render in errors ("rendering the candidate"). A chart that does
// not render with these values (it does not load, a template fails, the values do not satisfy its
// values.schema.json) comes back as renderErr, Helm's error, which is a finding about the chart.
// err says the render did not finish: a *worker.BudgetError past the budget, else the worker's
// failure. values and what comes back may hold what Secrets hold: they are not for logs.
func (r *Renderer) RenderChart(ctx context.Context, op string, archive []byte, hr *helmv2.HelmRelease, values map[string]any, opts chart.Options) (rendered *chart.Rendered, renderErr, err error) {
	h := header{Chart: &chartRequest{HelmRelease: hr, Values: values, Options: opts}}
	send := func(w io.Writer) error {
		enc := json.NewEncoder(w)
		if err := enc.Encode(h); err != nil {
			return err
		}
		return enc.Encode(entry{Path: "chart.tgz", Data: archive})
	}
	var res response
	if err := kind.Run(ctx, r.Executable, op, r.Budget, send, &res); err != nil {
		return nil, nil, err
	}
	if res.Error != "" {
		return nil, errors.New(res.Error), nil
	}
	if res.Chart == nil {
		return nil, nil, fmt.Errorf("%s: the render worker answered without the chart", op)
	}
	return res.Chart, nil, nil
}

// serveChart is a worker's chart render: it reads the archive that follows the header from dec,
// renders it, and writes the render or Helm's error to w.
func serveChart(dec *json.Decoder, req *chartRequest, w io.Writer) error {
	var e entry
	if err := dec.Decode(&e); err != nil {
		return fmt.Errorf("reading the chart archive: %w", err)
	}
	if req.HelmRelease == nil {
		return errors.New("reading the request: no HelmRelease")
	}
	var res response
	r, err := chart.Render(context.Background(), e.Data, req.HelmRelease, req.Values, req.Options)
	if err != nil {
		res.Error = err.Error()
	} else {
		res.Chart = r
	}
	return json.NewEncoder(w).Encode(res)
}
