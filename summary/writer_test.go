package summary_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/summary"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// The golden files were computed by an independent, bit-by-bit CRC32C in
// Python, not by this package.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(hex.EncodeToString(got)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if g := hex.EncodeToString(got); g != strings.TrimSpace(string(want)) {
		t.Errorf("%s:\n got %s\nwant %s", name, g, strings.TrimSpace(string(want)))
	}
}

func TestCRC32CKnownValues(t *testing.T) {
	// The check value of CRC-32C (Castagnoli), from its specification.
	if got := crc32.Checksum([]byte("123456789"), crc32.MakeTable(crc32.Castagnoli)); got != 0xE3069283 {
		t.Fatalf("crc32c(123456789) = %#x, want 0xe3069283", got)
	}
	for _, in := range []string{"", "123456789", "hello", strings.Repeat("x", 1000)} {
		if got, want := summary.MaskedCRC([]byte(in)), tbMaskedCRC([]byte(in)); got != want {
			t.Errorf("MaskedCRC(%q) = %#x, independent %#x", in, got, want)
		}
	}
	golden(t, "record_hello.golden", summary.AppendRecord(nil, []byte("hello")))
}

func newWriter(t *testing.T, dir string, opts summary.WriterOptions) *summary.Writer {
	t.Helper()
	w, err := summary.NewWriter(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func readTB(t *testing.T, path string) []tbEvent {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	events, err := tbReadEvents(b)
	if err != nil {
		t.Fatalf("independent reader: %s: %v", path, err)
	}
	return events
}

func TestFirstRecordIsFileVersion(t *testing.T) {
	dir := t.TempDir()
	w := newWriter(t, dir, summary.WriterOptions{Now: func() time.Time { return time.Unix(1, 5e8) }})
	// NewWriter flushes the file_version event at once.
	b, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "file_version_record.golden", b)
	events := readTB(t, w.Path())
	if len(events) != 1 || events[0].fileVersion != "brain.Event:2" || events[0].wallTime != 1.5 {
		t.Fatalf("events = %+v, want one with file_version brain.Event:2 at 1.5 s", events)
	}
}

func TestFileName(t *testing.T) {
	dir := t.TempDir()
	w := newWriter(t, dir, summary.WriterOptions{Suffix: "worker/1", Now: func() time.Time { return time.Unix(1700000000, 0) }})
	re := regexp.MustCompile(fmt.Sprintf(`^events\.out\.tfevents\.1700000000\.[A-Za-z0-9._-]+\.%d\.worker_1$`, os.Getpid()))
	if name := filepath.Base(w.Path()); !re.MatchString(name) {
		t.Errorf("file name %q does not match %v", name, re)
	}
	if filepath.Dir(w.Path()) != dir {
		t.Errorf("file %s not in %s", w.Path(), dir)
	}
}

func TestScalarsRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "logdir") // created by NewWriter
	w := newWriter(t, dir, summary.WriterOptions{Suffix: "chief"})
	type point struct {
		tag   string
		step  int64
		value float64
	}
	var want []point
	for step := int64(0); step < 500; step += 10 {
		for _, tag := range []string{"loss", "examples/s", "global_step/sec"} {
			p := point{tag, step, float64(step)*0.25 - 3.5}
			if err := w.AddScalar(p.tag, p.step, p.value); err != nil {
				t.Fatal(err)
			}
			want = append(want, p)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	events := readTB(t, w.Path())
	if events[0].fileVersion != summary.FileVersion {
		t.Fatalf("first event %+v, want file_version", events[0])
	}
	events = events[1:]
	if len(events) != len(want) {
		t.Fatalf("read %d scalar events, wrote %d", len(events), len(want))
	}
	for i, e := range events {
		p := want[i]
		if !e.hasSummary || len(e.values) != 1 || !e.values[0].isSimple {
			t.Fatalf("event %d = %+v, want one simple value", i, e)
		}
		if v := e.values[0]; v.tag != p.tag || e.step != p.step || v.simple != float32(p.value) {
			t.Errorf("event %d: %s@%d = %v, want %s@%d = %v", i, v.tag, e.step, v.simple, p.tag, p.step, p.value)
		}
		if e.wallTime < 1e9 {
			t.Errorf("event %d: wall time %v is not a current Unix time", i, e.wallTime)
		}
	}
	// The package's own reader agrees.
	pe, err := summary.ReadFile(w.Path())
	if err != nil || len(pe) != len(want)+1 {
		t.Fatalf("ReadFile: %d events, %v", len(pe), err)
	}
}

func writeSample(t *testing.T) (path string, data []byte) {
	t.Helper()
	w := newWriter(t, t.TempDir(), summary.WriterOptions{FlushInterval: -1})
	for step := range int64(3) {
		if err := w.AddScalar("loss", step, float64(step)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	return w.Path(), b
}

func TestTruncatedFinalRecord(t *testing.T) {
	_, full := writeSample(t)
	recs, err := tbRecords(full)
	if err != nil || len(recs) != 4 {
		t.Fatalf("sample: %d records, %v", len(recs), err)
	}
	lastLen := 12 + len(recs[3]) + 4
	for _, cut := range []int{1, 4, 11, 12, 13, lastLen - 4, lastLen - 1} {
		b := full[:len(full)-lastLen+cut]
		t.Run(fmt.Sprint("keep", cut), func(t *testing.T) {
			events, err := tbReadEvents(b)
			if !errors.Is(err, errTBTruncated) || len(events) != 3 {
				t.Errorf("independent reader: %d events, %v; want 3 and truncated", len(events), err)
			}
			pe, err := summary.ReadEvents(bytes.NewReader(b))
			if !errors.Is(err, summary.ErrTruncated) || len(pe) != 3 {
				t.Errorf("ReadEvents: %d events, %v; want 3 and ErrTruncated", len(pe), err)
			}
		})
	}
}

func TestCorruptRecordDetected(t *testing.T) {
	_, full := writeSample(t)
	recs, _ := tbRecords(full)
	second := 12 + len(recs[0]) + 4 // offset of record 1
	for _, tc := range []struct {
		name string
		at   int
	}{
		{"length", second + 2},
		{"length crc", second + 9},
		{"data", second + 14},
		{"data crc", second + 12 + len(recs[1]) + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(full)
			b[tc.at] ^= 0x40
			events, err := tbReadEvents(b)
			if !errors.Is(err, errTBChecksum) || len(events) != 1 {
				t.Errorf("independent reader: %d events, %v; want 1 and a checksum error", len(events), err)
			}
			pe, err := summary.ReadEvents(bytes.NewReader(b))
			if !errors.Is(err, summary.ErrCorrupt) || len(pe) != 1 {
				t.Errorf("ReadEvents: %d events, %v; want 1 and ErrCorrupt", len(pe), err)
			}
		})
	}
}

func TestHistogram(t *testing.T) {
	limits := summary.DefaultBucketLimits()
	for i := 1; i < len(limits); i++ {
		if limits[i] <= limits[i-1] {
			t.Fatalf("bucket limits not increasing at %d: %v, %v", i, limits[i-1], limits[i])
		}
	}
	if limits[0] != -math.MaxFloat64 || limits[len(limits)-1] != math.MaxFloat64 || limits[len(limits)/2] != 0 {
		t.Fatalf("limits run from %v through %v to %v", limits[0], limits[len(limits)/2], limits[len(limits)-1])
	}
	if n := len(limits); n != 1551 { // 774 positive limits below 1e20 and DBL_MAX, mirrored, and 0
		t.Errorf("%d bucket limits, want 1551", n)
	}
	for _, tc := range []struct {
		name   string
		values []float64
	}{
		{"empty", nil},
		{"one", []float64{3}},
		{"zeros", []float64{0, 0, 0}},
		{"mixed", []float64{-5, -1e-13, 0, 1e-13, 1, 1, 2.5, 1e6, -1e30, math.MaxFloat64}},
		{"spread", spread(1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := summary.NewHistogram(tc.values)
			if err != nil {
				t.Fatal(err)
			}
			if h.Num != float64(len(tc.values)) {
				t.Errorf("num = %v, want %d", h.Num, len(tc.values))
			}
			if len(h.Bucket) != len(h.BucketLimit) || len(h.Bucket) == 0 {
				t.Fatalf("%d buckets, %d limits", len(h.Bucket), len(h.BucketLimit))
			}
			var total float64
			for i, c := range h.Bucket {
				total += c
				if i > 0 && h.BucketLimit[i] <= h.BucketLimit[i-1] {
					t.Errorf("limits not increasing at %d", i)
				}
				if i > 0 && c == 0 && h.Bucket[i-1] == 0 {
					t.Errorf("two consecutive empty buckets at %d: runs must collapse", i)
				}
				// Independently: count the values in [previous limit, limit).
				lo := math.Inf(-1)
				if i > 0 {
					lo = h.BucketLimit[i-1]
				}
				want := 0.0
				for _, v := range tc.values {
					if v >= lo && (v < h.BucketLimit[i] || i == len(h.Bucket)-1 && v == h.BucketLimit[i]) {
						want++
					}
				}
				if c != want {
					t.Errorf("bucket %d [%g, %g) = %v, want %v", i, lo, h.BucketLimit[i], c, want)
				}
			}
			if total != h.Num {
				t.Errorf("bucket counts sum to %v, num %v", total, h.Num)
			}
			if len(tc.values) > 0 {
				lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
				for _, v := range tc.values {
					lo, hi, sum = min(lo, v), max(hi, v), sum+v
				}
				if h.Min != lo || h.Max != hi || h.Sum != sum {
					t.Errorf("min, max, sum = %v, %v, %v; want %v, %v, %v", h.Min, h.Max, h.Sum, lo, hi, sum)
				}
			}
		})
	}
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := summary.NewHistogram([]float64{1, bad}); !errors.Is(err, summary.ErrNonFinite) {
			t.Errorf("NewHistogram with %v: %v, want ErrNonFinite", bad, err)
		}
	}
}

func spread(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = math.Sin(float64(i)) * math.Exp(float64(i%40)-20)
	}
	return v
}

func TestHistogramRoundTrip(t *testing.T) {
	w := newWriter(t, t.TempDir(), summary.WriterOptions{})
	values := spread(500)
	if err := w.AddHistogram("layer1/weights", 7, values); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	events := readTB(t, w.Path())
	if len(events) != 2 || len(events[1].values) != 1 || events[1].values[0].histo == nil {
		t.Fatalf("events %+v, want file_version and one histogram", events)
	}
	e, h := events[1], events[1].values[0].histo
	if e.step != 7 || e.values[0].tag != "layer1/weights" || h.num != 500 || len(h.limits) != len(h.counts) {
		t.Fatalf("histogram %s@%d: num %v, %d limits, %d counts", e.values[0].tag, e.step, h.num, len(h.limits), len(h.counts))
	}
	var total float64
	for _, c := range h.counts {
		total += c
	}
	if total != h.num {
		t.Errorf("bucket counts sum to %v, num %v", total, h.num)
	}
}

func TestConcurrentWritersDistinctFiles(t *testing.T) {
	dir := t.TempDir()
	const writers, perWriter, goroutines = 6, 40, 3
	now := func() time.Time { return time.Unix(1700000000, 0) } // same second: names would clash
	paths := make([]string, writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers*goroutines)
	for i := range writers {
		wg.Go(func() {
			w, err := summary.NewWriter(dir, summary.WriterOptions{Suffix: "worker", Now: now})
			if err != nil {
				errs <- err
				return
			}
			paths[i] = w.Path()
			var inner sync.WaitGroup
			for g := range goroutines {
				inner.Go(func() {
					for s := range perWriter {
						if err := w.AddScalar(fmt.Sprintf("w%d/g%d", i, g), int64(s), float64(s)); err != nil {
							errs <- err
							return
						}
						if s%10 == 0 {
							if err := w.Flush(); err != nil {
								errs <- err
							}
						}
					}
				})
			}
			inner.Wait()
			if err := w.Close(); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, p := range paths {
		if seen[p] {
			t.Fatalf("writers share file %s", p)
		}
		seen[p] = true
		events := readTB(t, p)
		if events[0].fileVersion != summary.FileVersion || len(events) != 1+goroutines*perWriter {
			t.Fatalf("%s: %d events, first %+v", p, len(events), events[0])
		}
		steps := map[string]int{}
		for _, e := range events[1:] {
			tag := e.values[0].tag
			if !strings.HasPrefix(tag, fmt.Sprintf("w%d/", i)) {
				t.Errorf("%s holds %q from another writer", p, tag)
			}
			if int64(steps[tag]) != e.step { // each goroutine's steps in order
				t.Errorf("%s: %s step %d, want %d", p, tag, e.step, steps[tag])
			}
			steps[tag]++
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != writers {
		t.Errorf("%d files in the log directory, want %d", len(entries), writers)
	}
}

func TestAddSummaryAndMerge(t *testing.T) {
	a, err := summary.EncodeScalar("loss", 0.5)
	if err != nil {
		t.Fatal(err)
	}
	b, err := summary.EncodeHistogram("w", []float64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	merged, err := summary.Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, t.TempDir(), summary.WriterOptions{})
	if err := w.AddSummary(merged, 42); err != nil {
		t.Fatal(err)
	}
	if err := w.AddSummary([]byte{0xff, 0xff}, 43); !errors.Is(err, summary.ErrBadSummary) {
		t.Errorf("AddSummary of garbage: %v, want ErrBadSummary", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	events := readTB(t, w.Path())
	if len(events) != 2 {
		t.Fatalf("%d events, want 2", len(events))
	}
	e := events[1]
	if e.step != 42 || len(e.values) != 2 || e.values[0].tag != "loss" || e.values[0].simple != 0.5 ||
		e.values[1].tag != "w" || e.values[1].histo == nil || e.values[1].histo.num != 3 {
		t.Errorf("merged event %+v", e)
	}
	if _, err := summary.Merge(a, a); !errors.Is(err, summary.ErrDuplicateTag) {
		t.Errorf("Merge with a duplicate tag: %v, want ErrDuplicateTag", err)
	}
}

func TestWriterErrors(t *testing.T) {
	if _, err := summary.NewWriter("", summary.WriterOptions{}); err == nil {
		t.Error("NewWriter with an empty log directory succeeded")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := summary.NewWriter(file, summary.WriterOptions{}); err == nil {
		t.Error("NewWriter in a regular file succeeded")
	}
	w := newWriter(t, t.TempDir(), summary.WriterOptions{})
	for name, err := range map[string]error{
		"empty scalar tag":    w.AddScalar("", 0, 1),
		"empty histogram tag": w.AddHistogram("", 0, nil),
	} {
		if !errors.Is(err, summary.ErrEmptyTag) {
			t.Errorf("%s: %v, want ErrEmptyTag", name, err)
		}
	}
	if err := w.AddHistogram("h", 0, []float64{math.NaN()}); !errors.Is(err, summary.ErrNonFinite) {
		t.Errorf("NaN histogram: %v, want ErrNonFinite", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	for name, err := range map[string]error{
		"AddScalar": w.AddScalar("x", 1, 1),
		"Flush":     w.Flush(),
		"AddEvent":  w.AddEvent(&pb.Event{}),
	} {
		if !errors.Is(err, summary.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func TestSessionLog(t *testing.T) {
	w := newWriter(t, t.TempDir(), summary.WriterOptions{})
	if err := w.AddSessionLog(100, pb.SessionLog_START, "restored"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if events := readTB(t, w.Path()); len(events) != 2 || events[1].sessionStatus != 1 || events[1].step != 100 {
		t.Errorf("events %+v, want a START session log at step 100", events)
	}
}

func TestBufferedUntilFlush(t *testing.T) {
	w := newWriter(t, t.TempDir(), summary.WriterOptions{FlushInterval: -1})
	if err := w.AddScalar("loss", 1, 1); err != nil {
		t.Fatal(err)
	}
	if n := len(readTB(t, w.Path())); n != 1 {
		t.Errorf("before Flush: %d events on disk, want 1 (file_version only)", n)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := len(readTB(t, w.Path())); n != 2 {
		t.Errorf("after Flush: %d events on disk, want 2", n)
	}
}

func TestBackgroundFlush(t *testing.T) {
	w := newWriter(t, t.TempDir(), summary.WriterOptions{FlushInterval: time.Millisecond})
	if err := w.AddScalar("loss", 1, 1); err != nil {
		t.Fatal(err)
	}
	// Wait for the flusher's effect, bounded: a condition, not a guess at its timing.
	deadline := time.Now().Add(10 * time.Second)
	for {
		// The flusher may be mid-write: a truncated tail is not yet an error.
		b, err := os.ReadFile(w.Path())
		if err != nil {
			t.Fatal(err)
		}
		recs, err := tbRecords(b)
		if err != nil && !errors.Is(err, errTBTruncated) {
			t.Fatal(err)
		}
		if len(recs) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the scalar never reached the file without Flush")
		}
		time.Sleep(time.Millisecond)
	}
}
