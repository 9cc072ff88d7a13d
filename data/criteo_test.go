package data_test

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distflow/distflow/data"
)

var updateCriteo = flag.Bool("update-criteo", false, "rewrite testdata/criteo/day_0.txt from criteoFixture")

// criteoFixture generates n lines in the exact Criteo display-advertising
// TSV format (label, 13 integer features, 26 categorical features as 8
// lowercase hex digits; about a fifth of the integers and a tenth of the
// categories empty, some integers -1 or large as in the real logs),
// deterministically. The real data cannot be downloaded here, so the
// fixture is this generator's output: its values are made up, its format
// is Criteo's. Clicks are likelier for half the values of C1 and for large
// I1, so that a model has something to learn.
func criteoFixture(n int) []byte {
	rng := rand.New(rand.NewPCG(17, 0x637269746f)) // "crito"
	var b bytes.Buffer
	for range n {
		var fields [1 + data.DenseFeatures + data.CategoricalFeatures]string
		ints := make([]int, data.DenseFeatures)
		for j := range ints {
			ints[j] = int(math.Exp(rng.NormFloat64()*1.5 + 1))
			if j == 1 && rng.IntN(10) == 0 {
				ints[j] = -1 // I2 has negative values in the real logs
			}
			if rng.IntN(5) > 0 {
				fields[1+j] = fmt.Sprint(ints[j])
			}
		}
		c1 := rng.IntN(20)
		for f := range data.CategoricalFeatures {
			v := rng.Uint32() % uint32(50*(f+1))
			if f == 0 {
				v = uint32(c1)
			}
			if f == 0 || rng.IntN(10) > 0 {
				// A fixed scramble of v: hex strings that look like Criteo's hashes.
				fields[1+data.DenseFeatures+f] = fmt.Sprintf("%08x", (v*2654435761+uint32(f)*40503)^0x5bd1e995)
			}
		}
		logit := -1.5 + 0.3*math.Log1p(float64(max(ints[0], 0)))
		if c1%2 == 0 {
			logit += 1.5
		}
		fields[0] = "0"
		if rng.Float64() < 1/(1+math.Exp(-logit)) {
			fields[0] = "1"
		}
		b.WriteString(strings.Join(fields[:], "\t"))
		b.WriteByte('\n')
	}
	return b.Bytes()
}

const criteoFixtureLines = 600

// TestCriteoFixture reads the committed Criteo-format fixture with
// LoadCriteoDir: every line an example, empty features read as 0 (dense)
// or as the empty string's bucket (categorical), and the file is exactly
// what the generator makes (go test ./data -run CriteoFixture
// -update-criteo rewrites it).
func TestCriteoFixture(t *testing.T) {
	dir := filepath.Join("testdata", "criteo")
	file := filepath.Join(dir, "day_0.txt")
	want := criteoFixture(criteoFixtureLines)
	if *updateCriteo {
		if err := os.WriteFile(file, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not the generator's output (rerun with -update-criteo if the generator changed)", file)
	}
	const vocab = 1000
	l, err := data.LoadCriteoDir(dir, vocab, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Len() != criteoFixtureLines || l.Planted != nil {
		t.Fatalf("%d examples (planted %v), want %d", l.Len(), l.Planted != nil, criteoFixtureLines)
	}
	lines := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
	var clicks float32
	emptyDense, emptyCat := 0, 0
	for i, line := range lines {
		fields := strings.Split(line, "\t")
		if len(fields) != 40 {
			t.Fatalf("line %d has %d fields", i+1, len(fields))
		}
		clicks += l.Labels.Float32s()[i]
		for j, f := range fields[1:14] {
			d := l.Dense.Float32s()[i*data.DenseFeatures+j]
			if f == "" {
				emptyDense++
				if d != 0 {
					t.Fatalf("line %d: empty I%d read as %v", i+1, j+1, d)
				}
			}
		}
		for f, s := range fields[14:] {
			id := l.Cat.Int64s()[i*data.CategoricalFeatures+f]
			if id < int64(f*vocab) || id >= int64((f+1)*vocab) {
				t.Fatalf("line %d: C%d id %d outside its block", i+1, f+1, id)
			}
			if s == "" {
				emptyCat++
			}
		}
	}
	n := float32(criteoFixtureLines)
	if clicks < 0.1*n || clicks > 0.6*n || emptyDense == 0 || emptyCat == 0 {
		t.Errorf("%v clicks, %d empty integers, %d empty categories in %d lines", clicks, emptyDense, emptyCat, criteoFixtureLines)
	}
	// The limit stops mid-file.
	if l, err := data.LoadCriteoDir(dir, vocab, 100); err != nil || l.Len() != 100 {
		t.Errorf("limit 100: %v examples, %v", l, err)
	}
}
