// Package metricstest scrapes a task's /metrics in tests and parses it
// with Prometheus' own text parser, as a Prometheus server would.
package metricstest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are the metric families of one scrape, by name.
type Families map[string]*dto.MetricFamily

// Scrape GETs url (http://host:port/metrics) as text and parses it with
// expfmt's text parser; any line it refuses fails the scrape.
func Scrape(ctx context.Context, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metricstest: scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return nil, fmt.Errorf("metricstest: scraping %s: %s: %s", url, resp.Status, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return nil, fmt.Errorf("metricstest: scraping %s: content type %q, want text/plain", url, ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("metricstest: parsing %s: %w", url, err)
	}
	return fams, nil
}

// Sum returns the sum over the series of family name whose labels include
// match: a counter's or gauge's values, a histogram's sample counts. A
// family that is missing sums to 0.
func (f Families) Sum(name string, match map[string]string) float64 {
	fam := f[name]
	if fam == nil {
		return 0
	}
	var s float64
	for _, m := range fam.GetMetric() {
		if !matches(m, match) {
			continue
		}
		switch {
		case m.Counter != nil:
			s += m.GetCounter().GetValue()
		case m.Gauge != nil:
			s += m.GetGauge().GetValue()
		case m.Histogram != nil:
			s += float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			s += m.GetUntyped().GetValue()
		}
	}
	return s
}

func matches(m *dto.Metric, match map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := match[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(match)
}

// Label returns the value of label name of m ("" if it has none).
func Label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// CheckTaskLabels returns an error naming the first series of f without
// the constant labels job=job and task=task.
func (f Families) CheckTaskLabels(job, task string) error {
	for name, fam := range f {
		for _, m := range fam.GetMetric() {
			if Label(m, "job") != job || Label(m, "task") != task {
				return fmt.Errorf("metricstest: a series of %s has job=%q task=%q, want %q %q", name, Label(m, "job"), Label(m, "task"), job, task)
			}
		}
	}
	return nil
}
