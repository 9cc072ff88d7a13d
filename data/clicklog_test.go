package data_test

import (
	"math"
	"strings"
	"testing"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/tensor"
)

func TestSyntheticClickLogIsDeterministicWithAPlantedCeiling(t *testing.T) {
	cfg := data.ClickLogConfig{Examples: 20000, Vocab: 100, Seed: 5}
	a, err := data.SyntheticClickLog(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := data.SyntheticClickLog(cfg)
	if !tensor.Equal(a.Cat, b.Cat) || !tensor.Equal(a.Dense, b.Dense) || !tensor.Equal(a.Labels, b.Labels) {
		t.Fatal("the same config gave two different logs")
	}
	if a.Len() != 20000 || a.Rows() != 2600 {
		t.Fatalf("%d examples, %d rows", a.Len(), a.Rows())
	}
	// Ids stay in their feature's block, and are Zipf-skewed: the most
	// frequent id of feature 0 is far more common than 1/vocab.
	counts := map[int64]int{}
	for i, id := range a.Cat.Int64s() {
		f := int64(i % data.CategoricalFeatures)
		if id < f*100 || id >= (f+1)*100 {
			t.Fatalf("example %d feature %d: id %d outside [%d, %d)", i/26, f, id, f*100, (f+1)*100)
		}
		if f == 0 {
			counts[id]++
		}
	}
	top := 0
	for _, c := range counts {
		top = max(top, c)
	}
	if top < 20000/10 {
		t.Errorf("the most frequent id of feature 0 occurs %d times in 20000: not skewed", top)
	}
	ctr := 0.0
	for _, y := range a.Labels.Float32s() {
		ctr += float64(y)
	}
	ctr /= float64(a.Len())
	auc := data.AUC(a.Planted, a.Labels.Float32s())
	t.Logf("click rate %.3f, planted AUC %.4f, planted log loss %.4f", ctr, auc, data.LogLoss(a.Planted, a.Labels.Float32s()))
	if ctr < 0.1 || ctr > 0.5 {
		t.Errorf("click rate %.3f: want an ad-like rate in [0.1, 0.5]", ctr)
	}
	if auc < 0.7 || auc > 0.95 {
		t.Errorf("planted AUC %.4f: want a ceiling in [0.7, 0.95]", auc)
	}
	tr, te, err := a.Split(15000)
	if err != nil || tr.Len() != 15000 || te.Len() != 5000 || te.Planted[0] != a.Planted[15000] {
		t.Fatalf("Split: %v", err)
	}
}

func TestAUCAndLogLoss(t *testing.T) {
	labels := []float32{0, 0, 1, 1}
	for _, c := range []struct {
		scores []float64
		want   float64
	}{
		{[]float64{0.1, 0.4, 0.35, 0.8}, 0.75},
		{[]float64{0.1, 0.2, 0.3, 0.4}, 1},
		{[]float64{0.5, 0.5, 0.5, 0.5}, 0.5},
		{[]float64{0.9, 0.8, 0.2, 0.1}, 0},
	} {
		if got := data.AUC(c.scores, labels); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("AUC(%v) = %v, want %v", c.scores, got, c.want)
		}
	}
	if !math.IsNaN(data.AUC([]float64{1, 2}, []float32{1, 1})) {
		t.Error("AUC of one class should be NaN")
	}
	if got, want := data.LogLoss([]float64{0.5, 0.5}, []float32{0, 1}), math.Log(2); math.Abs(got-want) > 1e-12 {
		t.Errorf("LogLoss = %v, want %v", got, want)
	}
}

func TestReadCriteo(t *testing.T) {
	row := func(label string, ints []string, cats []string) string {
		return label + "\t" + strings.Join(ints, "\t") + "\t" + strings.Join(cats, "\t")
	}
	ints := make([]string, 13)
	cats := make([]string, 26)
	for i := range ints {
		ints[i] = "3"
	}
	ints[2] = "" // missing
	ints[4] = "-1"
	for i := range cats {
		cats[i] = "68fd1e64"
	}
	cats[25] = ""
	in := row("1", ints, cats) + "\n" + row("0", ints, cats) + "\r\n\n"
	l, err := data.ReadCriteo(strings.NewReader(in), "day_0", 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Len() != 2 || l.Labels.Float32s()[0] != 1 || l.Labels.Float32s()[1] != 0 {
		t.Fatalf("labels %v", l.Labels.Float32s())
	}
	d := l.Dense.Float32s()
	if d[0] != float32(math.Log1p(3)) || d[2] != 0 || d[4] != 0 {
		t.Errorf("dense %v: want log(1+3), and 0 for missing and negative", d[:13])
	}
	c := l.Cat.Int64s()
	if c[1]-1000 != c[0] || c[26] != c[0] || c[25] < 25000 || c[25] >= 26000 {
		t.Errorf("categorical ids %v: want the same hash in each feature's block", c[:26])
	}
	if _, err := data.ReadCriteo(strings.NewReader("1\t2\n"), "bad.txt", 10, 0); err == nil || !strings.Contains(err.Error(), "bad.txt:1") {
		t.Errorf("a short line: %v", err)
	}
	if _, err := data.ReadCriteo(strings.NewReader(row("2", ints, cats)), "x", 10, 0); err == nil || !strings.Contains(err.Error(), "label") {
		t.Errorf("a bad label: %v", err)
	}
	if l, err := data.ReadCriteo(strings.NewReader(in), "x", 10, 1); err != nil || l.Len() != 1 {
		t.Errorf("limit 1: %v", err)
	}
	for _, bad := range []string{"NaN", "inf", "-Inf", "1e400"} {
		ints[0] = bad
		if _, err := data.ReadCriteo(strings.NewReader(row("1", ints, cats)), "x", 10, 0); err == nil || !strings.Contains(err.Error(), "integer feature 1") {
			t.Errorf("integer feature %q: %v; want a refusal naming it", bad, err)
		}
	}
}

// FuzzReadCriteo: whatever the bytes, ReadCriteo returns an error or a log
// whose shapes agree, whose dense features are finite and whose ids lie
// in their feature's block.
func FuzzReadCriteo(f *testing.F) {
	line := "1\t" + strings.Repeat("3\t", 12) + "\t" + strings.Repeat("68fd1e64\t", 25) + "a"
	f.Add(line+"\n"+line+"\r\n", 7)
	f.Add("0\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t", 1)
	f.Fuzz(func(t *testing.T, in string, vocab int) {
		l, err := data.ReadCriteo(strings.NewReader(in), "fuzz", vocab, 0)
		if err != nil {
			return
		}
		n := l.Len()
		if n == 0 || l.Dense.Shape()[0] != n || l.Cat.Shape()[0] != n || l.Labels.Shape()[0] != n {
			t.Fatalf("shapes disagree: %v %v %v", l.Dense.Shape(), l.Cat.Shape(), l.Labels.Shape())
		}
		for i, v := range l.Dense.Float32s() {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("dense value %d is %v", i, v)
			}
		}
		for i, id := range l.Cat.Int64s() {
			f := int64(i % data.CategoricalFeatures)
			if id < f*int64(vocab) || id >= (f+1)*int64(vocab) {
				t.Fatalf("id %d of feature %d is outside its block of %d", id, f, vocab)
			}
		}
	})
}
