package scale

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sample is one scrape of a Prometheus text endpoint: every series with its labels and value.
type Sample struct {
	At     time.Time
	Series []Series
}

// Series is one line of the text exposition format.
type Series struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Sum adds the values of the series named name whose labels include match.
func (s Sample) Sum(name string, match map[string]string) float64 {
	total := 0.0
	for _, x := range s.Series {
		if x.Name != name {
			continue
		}
		ok := true
		for k, v := range match {
			if x.Labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			total += x.Value
		}
	}
	return total
}

// Has tells whether the scrape holds a series named name.
func (s Sample) Has(name string) bool {
	for _, x := range s.Series {
		if x.Name == name {
			return true
		}
	}
	return false
}

// scrape reads a metrics endpoint.
func scrape(ctx context.Context, url string) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Sample{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Sample{}, fmt.Errorf("%s: %s", url, resp.Status)
	}
	s, err := parseMetrics(resp.Body)
	s.At = time.Now()
	return s, err
}

// parseMetrics reads the Prometheus text exposition format (comments skipped).
func parseMetrics(r io.Reader) (Sample, error) {
	var s Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		x, err := parseSeries(line)
		if err != nil {
			return s, err
		}
		s.Series = append(s.Series, x)
	}
	return s, sc.Err()
}

func parseSeries(line string) (Series, error) {
	x := Series{Labels: map[string]string{}}
	rest := line
	if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
		x.Name = line[:i]
		rest = line[i+1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, "=\"")
			if eq < 0 {
				return x, fmt.Errorf("bad metric line %q", line)
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			for {
				if rest == "" {
					return x, fmt.Errorf("bad metric line %q", line)
				}
				c := rest[0]
				rest = rest[1:]
				if c == '\\' && rest != "" {
					switch rest[0] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[0])
					}
					rest = rest[1:]
					continue
				}
				if c == '"' {
					break
				}
				val.WriteByte(c)
			}
			x.Labels[key] = val.String()
		}
	} else {
		name, r, _ := strings.Cut(line, " ")
		x.Name, rest = name, r
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return x, fmt.Errorf("bad metric line %q", line)
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return x, fmt.Errorf("bad metric value in %q: %w", line, err)
	}
	x.Value = v
	return x, nil
}
