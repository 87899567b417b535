package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Prometheus is a Provider over the Prometheus HTTP API's range queries (/api/v1/query_range).
// Credentials go in the Authorization header of each query, and never into an error.
type Prometheus struct {
	// Address is the API's base URL, before /api/v1.
	Address string
	// Client sends the queries; nil means a client with a 30 s timeout.
	Client *http.Client
	// Token is a bearer token; Username and Password basic auth. Empty: neither.
	Token              string
	Username, Password string
}

// maxAnswer bounds the body of one answer read: about 1.6 million points (41 bytes each), twice what
// the collector asks of 1,000 clusters at most (it widens the step of a long window).
const maxAnswer = 64 << 20

var defaultClient = &http.Client{Timeout: 30 * time.Second}

// Range implements Provider. The query is sent as a form (POST), so a query naming 1,000 clusters
// is not bound by a URL's length.
func (p *Prometheus) Range(ctx context.Context, query, label string, start, end time.Time, step time.Duration) (map[string][]float64, error) {
	form := url.Values{
		"query": {query},
		"start": {strconv.FormatFloat(float64(start.UnixMilli())/1000, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixMilli())/1000, 'f', 3, 64)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(p.Address, "/")+"/api/v1/query_range", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("prometheus at %s: %w", p.where(), redact(err))
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	switch {
	case p.Token != "":
		req.Header.Set("Authorization", "Bearer "+p.Token)
	case p.Username != "" || p.Password != "":
		req.SetBasicAuth(p.Username, p.Password)
	}
	client := p.Client
	if client == nil {
		client = defaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("prometheus at %s did not answer: %w", p.where(), redact(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, fmt.Errorf("prometheus at %s: reading its answer: %w", p.where(), err)
	}
	if len(body) > maxAnswer {
		return nil, fmt.Errorf("prometheus at %s answered more than %d MiB: shorten the soak or lengthen sampleInterval", p.where(), maxAnswer>>20)
	}
	return parseMatrix(p.where(), resp.StatusCode, body, label)
}

// answer is the Prometheus API's envelope of a range query.
type answer struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Values [][2]any          `json:"values"`
		} `json:"result"`
	} `json:"data"`
}

// parseMatrix reads a range query's answer: the points of each series, by its label's value; with
// label "", the points of the one series answered, by "".
func parseMatrix(address string, status int, body []byte, label string) (map[string][]float64, error) {
	var a answer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("prometheus at %s answered HTTP %d with no API answer: %.200s", address, status, body)
	}
	if a.Status != "success" {
		return nil, fmt.Errorf("prometheus at %s refused the query (HTTP %d, %s): %s", address, status, a.ErrorType, a.Error)
	}
	if a.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("prometheus at %s answered a %s, not the matrix of a range query", address, a.Data.ResultType)
	}
	out := map[string][]float64{}
	for _, s := range a.Data.Result {
		name, ok := s.Metric[label]
		if !ok && label != "" {
			continue
		}
		if _, dup := out[name]; dup && label == "" {
			return nil, fmt.Errorf("prometheus at %s answers more than one series for the query, where one cluster's own Prometheus should answer one: aggregate it, as in sum (...)", address)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("the query answers more than one series for %s %q: aggregate it by that label, as in sum by (%s) (...)", label, name, label)
		}
		out[name] = nil
		for _, v := range s.Values {
			str, _ := v[1].(string)
			f, err := strconv.ParseFloat(str, 64)
			if err != nil {
				return nil, fmt.Errorf("prometheus at %s answered a point that is not a number: %q", address, str)
			}
			out[name] = append(out[name], f)
		}
	}
	return out, nil
}

// where is the address for messages: without the userinfo a URL can carry.
func (p *Prometheus) where() string {
	u, err := url.Parse(p.Address)
	if err != nil {
		return "(an address that is not a URL)"
	}
	u.User = nil
	return u.String()
}

// redact keeps a transport error's cause and drops the URL it names (a URL can carry userinfo).
func redact(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}
