package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/distflow/distflow/rpc"
)

// TestMetricsScrapeIsBounded: a /metrics that streams without end is cut
// off with an error naming it, in both formats the dashboard reads.
func TestMetricsScrapeIsBounded(t *testing.T) {
	// Families of 32 KiB each (a long help text): the cap is reached in
	// about 500 of them, quickly even under the race detector.
	help := strings.Repeat("h", 32<<10)
	text := func(i int) []byte {
		return fmt.Appendf(nil, "# HELP m%d %s\nm%d{task=\"/job:ps/task:0\"} 1\n", i, help, i)
	}
	proto := func(i int) []byte {
		var b bytes.Buffer
		name, typ, v := fmt.Sprintf("m%d", i), dto.MetricType_GAUGE, 1.0
		protodelim.MarshalTo(&b, &dto.MetricFamily{Name: &name, Help: &help, Type: &typ, Metric: []*dto.Metric{{Gauge: &dto.Gauge{Value: &v}}}})
		return b.Bytes()
	}
	for contentType, family := range map[string]func(int) []byte{
		"text/plain; version=0.0.4": text,
		"application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited": proto,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", contentType)
			for i := 0; r.Context().Err() == nil; {
				var batch []byte
				for range 8 {
					batch = append(batch, family(i)...)
					i++
				}
				if _, err := w.Write(batch); err != nil {
					return
				}
			}
		}))
		p := NewRPCProber(rpc.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := p.Metrics(ctx, srv.URL+"/metrics")
		cancel()
		p.Close()
		srv.Close()
		if want := fmt.Sprintf("over %d MiB", maxScrapeBytes>>20); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one saying %q", contentType, err, want)
		}
	}
}
