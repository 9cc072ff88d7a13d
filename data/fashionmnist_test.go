package data

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/internal/race"
	"github.com/distflow/distflow/tensor"
)

func TestEmbedded(t *testing.T) {
	train, test, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		s    Split
		n    int
	}{{"train", train, 8000}, {"test", test, 2000}} {
		if c.s.Len() != c.n {
			t.Errorf("%s: %d examples, want %d", c.name, c.s.Len(), c.n)
		}
		if c.s.Images.DType() != tensor.Float32 || !slices.Equal(c.s.Images.Shape(), []int{c.n, ImageSize}) {
			t.Errorf("%s: images %v %v", c.name, c.s.Images.DType(), c.s.Images.Shape())
		}
		if c.s.Labels.DType() != tensor.Int32 || !slices.Equal(c.s.Labels.Shape(), []int{c.n}) {
			t.Errorf("%s: labels %v %v", c.name, c.s.Labels.DType(), c.s.Labels.Shape())
		}
		var lo, hi float32 = 1, 0
		for _, v := range c.s.Images.Float32s() {
			lo, hi = min(lo, v), max(hi, v)
		}
		if lo != 0 || hi != 1 {
			t.Errorf("%s: pixels in [%v, %v], want [0, 1]", c.name, lo, hi)
		}
		// The subset is roughly class balanced.
		var counts [NumClasses]int
		for _, y := range c.s.Labels.Int32s() {
			counts[y]++
		}
		for k, n := range counts {
			if share := float64(n) / float64(c.n); share < 0.08 || share > 0.12 {
				t.Errorf("%s: class %d (%s) has %d of %d examples", c.name, k, ClassNames[k], n, c.n)
			}
		}
	}
}

// writeMNIST writes n fake examples in the four standard files, labels k%10
// and pixel values k.
func writeMNIST(t *testing.T, dir string, nTrain, nTest int, compress bool) {
	t.Helper()
	write := func(stem string, x *tensor.Tensor) {
		var buf bytes.Buffer
		if err := WriteIDX(&buf, x); err != nil {
			t.Fatal(err)
		}
		b, name := buf.Bytes(), stem
		if compress {
			b, name = gz(t, b), stem+".gz"
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []struct {
		prefix string
		n      int
	}{{"train", nTrain}, {"t10k", nTest}} {
		images := tensor.New(tensor.Uint8, s.n, 28, 28)
		labels := tensor.New(tensor.Uint8, s.n)
		for k := range s.n {
			labels.Uint8s()[k] = uint8(k % 10)
			for p := range ImageSize {
				images.Uint8s()[k*ImageSize+p] = uint8(k)
			}
		}
		write(s.prefix+"-images-idx3-ubyte", images)
		write(s.prefix+"-labels-idx1-ubyte", labels)
	}
}

func TestLoadFashionMNIST(t *testing.T) {
	for _, compress := range []bool{false, true} {
		dir := t.TempDir()
		writeMNIST(t, dir, 12, 3, compress)
		train, test, err := LoadFashionMNIST(dir)
		if err != nil {
			t.Fatal(err)
		}
		if train.Len() != 12 || test.Len() != 3 {
			t.Fatalf("got %d and %d examples, want 12 and 3", train.Len(), test.Len())
		}
		if got := train.Labels.Int32s()[11]; got != 1 {
			t.Errorf("label 11 = %d, want 1", got)
		}
		if got, want := train.Images.Float32s()[5*ImageSize+3], float32(5)/255; got != want {
			t.Errorf("pixel = %v, want %v", got, want)
		}
		d, err := test.Dataset()
		if err != nil {
			t.Fatal(err)
		}
		if got := labels(t, d); len(got) != 3 || got[2] != 2 {
			t.Errorf("dataset labels %v", got)
		}
	}
}

func TestLoadFashionMNISTErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(dir string) error
		want   string
	}{
		{"missing file", func(dir string) error {
			return os.Remove(filepath.Join(dir, "t10k-labels-idx1-ubyte"))
		}, "neither t10k-labels-idx1-ubyte.gz nor t10k-labels-idx1-ubyte exists"},
		{"count mismatch", func(dir string) error {
			var buf bytes.Buffer
			WriteIDX(&buf, tensor.New(tensor.Uint8, 4))
			return os.WriteFile(filepath.Join(dir, "train-labels-idx1-ubyte"), buf.Bytes(), 0o644)
		}, "train-images-idx3-ubyte has 5 images but train-labels-idx1-ubyte has 4 labels"},
		{"bad label", func(dir string) error {
			var buf bytes.Buffer
			WriteIDX(&buf, tensor.MustFromSlice([]uint8{0, 1, 10, 2, 3}, 5))
			return os.WriteFile(filepath.Join(dir, "train-labels-idx1-ubyte"), buf.Bytes(), 0o644)
		}, "label 10 of example 2 is outside 0..9"},
		{"wrong image size", func(dir string) error {
			var buf bytes.Buffer
			WriteIDX(&buf, tensor.New(tensor.Uint8, 2, 32, 32))
			return os.WriteFile(filepath.Join(dir, "t10k-images-idx3-ubyte"), buf.Bytes(), 0o644)
		}, "t10k-images-idx3-ubyte: got uint8 [2,32,32], want uint8 images of 784 pixels"},
		{"float labels", func(dir string) error {
			var buf bytes.Buffer
			WriteIDX(&buf, tensor.New(tensor.Float32, 2))
			return os.WriteFile(filepath.Join(dir, "t10k-labels-idx1-ubyte"), buf.Bytes(), 0o644)
		}, "got float32 [2], want uint8 labels [N]"},
		{"corrupt file", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "train-images-idx3-ubyte"), []byte{0, 0, 8, 3, 0}, 0o644)
		}, "train-images-idx3-ubyte: malformed IDX data: truncated header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeMNIST(t, dir, 5, 2, false)
			if err := tc.mutate(dir); err != nil {
				t.Fatal(err)
			}
			_, _, err := LoadFashionMNIST(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestLoadInstalledFashionMNIST(t *testing.T) {
	if testing.Short() || race.Enabled {
		t.Skip("decompresses 55 MB: skipped with -short or -race")
	}
	if _, err := os.Stat(DefaultFashionMNISTDir); err != nil {
		t.Skipf("Fashion-MNIST not installed: %v", err)
	}
	train, test, err := LoadFashionMNIST(DefaultFashionMNISTDir)
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 60000 || test.Len() != 10000 {
		t.Errorf("got %d and %d examples, want 60000 and 10000", train.Len(), test.Len())
	}
	// The embedded subset is the head of the full data set.
	etrain, etest, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ full, sub Split }{{train, etrain}, {test, etest}} {
		n := c.sub.Len()
		if !equalSlices(c.full.Labels.Int32s()[:n], c.sub.Labels.Int32s()) ||
			!equalSlices(c.full.Images.Float32s()[:n*ImageSize], c.sub.Images.Float32s()) {
			t.Error("embedded subset differs from the head of the installed data set")
		}
	}
}

func equalSlices[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLocate(t *testing.T) {
	// What an empty flag and environment give depends on this machine.
	fallbackDir, fallbackEmbedded := DefaultFashionMNISTDir, false
	if fi, err := os.Stat(DefaultFashionMNISTDir); err != nil || !fi.IsDir() {
		fallbackDir, fallbackEmbedded = "", true
	}
	tests := []struct {
		name, flag, env string
		wantDir         string
		wantEmbedded    bool
	}{
		{"flag wins", "/flag", "/env", "/flag", false},
		{"env next", "", "/env", "/env", false},
		{"installed or embedded", "", "", fallbackDir, fallbackEmbedded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(DataEnv, tc.env)
			dir, embedded := Locate(tc.flag)
			if dir != tc.wantDir || embedded != tc.wantEmbedded {
				t.Errorf("Locate(%q) with $%s=%q = %q, %v; want %q, %v",
					tc.flag, DataEnv, tc.env, dir, embedded, tc.wantDir, tc.wantEmbedded)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	writeMNIST(t, dir, 4, 2, true)
	train, _, from, err := Load(dir)
	if err != nil || from != dir || train.Len() != 4 {
		t.Errorf("Load(%q) = %d examples from %q, %v", dir, train.Len(), from, err)
	}
	_, _, _, err = Load(filepath.Join(dir, "nowhere"))
	if err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("Load of a missing dir: error %v does not name it", err)
	}
}

func TestClassNames(t *testing.T) {
	if ClassNames[0] != "T-shirt/top" || ClassNames[9] != "Ankle boot" {
		t.Errorf("ClassNames = %q", ClassNames)
	}
}
