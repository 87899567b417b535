package metrics

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The Prometheus API's answers are read as a Provider promises: the points of each series by its
// cluster label, the query sent as a form with the clusters put in, the credentials in the header
// only; a refused query, a non-matrix answer and two series of one cluster are errors naming what
// to fix. (The evidence of the gate itself comes from a real Prometheus: test/e2e.)
func TestPrometheusRange(t *testing.T) {
	var gotQuery, gotAuth string
	answer := `{"status":"success","data":{"resultType":"matrix","result":[
		{"metric":{"cluster":"a.eu"},"values":[[1,"0.1"],[2,"0.3"],[3,"NaN"]]},
		{"metric":{"cluster":"b"},"values":[[1,"0"]]},
		{"metric":{"other":"x"},"values":[[1,"9"]]}]}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.Method != http.MethodPost || r.URL.Path != "/api/v1/query_range" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		gotQuery, gotAuth = r.PostForm.Get("query"), r.Header.Get("Authorization")
		_, _ = w.Write([]byte(answer))
	}))
	defer srv.Close()
	p := &Prometheus{Address: srv.URL + "/", Token: "s3cret"}
	q := Expand(`sum by (cluster) (rate(x{cluster=~"{{clusters}}"}[1m]))`, []string{"a.eu", "b"})
	got, err := p.Range(context.Background(), q, "cluster", time.Unix(0, 0), time.Unix(3, 0), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := `sum by (cluster) (rate(x{cluster=~"a\\.eu|b"}[1m]))`; gotQuery != want || gotAuth != "Bearer s3cret" {
		t.Fatalf("sent query %q auth %q, want %q and the bearer token", gotQuery, gotAuth, want)
	}
	if len(got) != 2 || len(got["a.eu"]) != 3 || got["b"][0] != 0 {
		t.Fatalf("series %v, want a.eu's three points and b's one", got)
	}
	s, ok := Summarize(got["a.eu"])
	if !ok || s.Count != 2 || s.Min != 0.1 || s.Max != 0.3 || math.Abs(s.Mean-0.2) > 1e-9 || s.Last != 0.3 {
		t.Fatalf("summary %+v, want the two numbers of a.eu (NaN left out)", s)
	}
	if _, ok := Summarize([]float64{math.NaN()}); ok {
		t.Fatal("a summary of no number is ok")
	}

	for _, tc := range []struct{ answer, want string }{
		{`{"status":"error","errorType":"bad_data","error":"parse error at char 3"}`, "refused the query"},
		{`{"status":"success","data":{"resultType":"vector","result":[]}}`, "not the matrix"},
		{`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"cluster":"b","code":"200"},"values":[]},{"metric":{"cluster":"b","code":"500"},"values":[]}]}}`, "sum by (cluster)"},
		{`<html>proxy error</html>`, "no API answer"},
	} {
		answer = tc.answer
		_, err := p.Range(context.Background(), q, "cluster", time.Unix(0, 0), time.Unix(3, 0), time.Second)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("answer %s: error %v, want one saying %q and no credential", tc.answer, err, tc.want)
		}
	}
	srv.Close()
	down := &Prometheus{Address: "http://user:pw@" + strings.TrimPrefix(srv.URL, "http://"), Token: "s3cret"}
	if _, err := down.Range(context.Background(), q, "cluster", time.Unix(0, 0), time.Unix(3, 0), time.Second); err == nil ||
		strings.Contains(err.Error(), "pw") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a Prometheus that is down: %v, want an error with no credential", err)
	}
}
