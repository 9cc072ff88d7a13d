package savedmodel_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/savedmodel/savedmodeltest"
	"github.com/distflow/distflow/tensor"
)

// FuzzParseMetadata: any bytes either parse into a metadata whose signature
// is usable, or fail with one of the package's sentinels; never a panic.
// The seed corpus is in testdata/fuzz/FuzzParseMetadata.
func FuzzParseMetadata(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		md, sig, err := savedmodel.ParseMetadata(b)
		if err != nil {
			if !errors.Is(err, savedmodel.ErrIncomplete) && !errors.Is(err, savedmodel.ErrUnsupported) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if md.FormatVersion != savedmodel.FormatVersion || len(sig.Inputs) == 0 || len(sig.Outputs) == 0 {
			t.Fatalf("accepted %+v with signature %+v", md, sig)
		}
		for _, ti := range sig.Inputs {
			if !ti.DType.Valid() {
				t.Fatalf("accepted dtype %v", ti.DType)
			}
		}
	})
}

// FuzzLoad writes the three files of an export from fuzzed bytes and loads
// them: Load must fail cleanly or return a predictor that predicts or fails
// cleanly. The seeds are a real export of the small model.
func FuzzLoad(f *testing.F) {
	b, err := savedmodeltest.Small(1)
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	dir := filepath.Join(f.TempDir(), "1")
	if err := savedmodel.Write(dir, b.Model); err != nil {
		f.Fatal(err)
	}
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			f.Fatal(err)
		}
		return data
	}
	md, gr, vars := read("model.json"), read("graph.pb"), read("variables.bin")
	f.Add(md, gr, vars)
	f.Add(md, gr[:len(gr)/2], vars)
	f.Add(md, gr, vars[:len(vars)-3])
	f.Fuzz(func(t *testing.T, md, gr, vars []byte) {
		dir := t.TempDir()
		for name, data := range map[string][]byte{"model.json": md, "graph.pb": gr, "variables.bin": vars} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		p, err := savedmodel.Load(dir)
		if err != nil {
			if !errors.Is(err, savedmodel.ErrIncomplete) && !errors.Is(err, savedmodel.ErrUnsupported) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		defer p.Close()
		in := map[string]*tensor.Tensor{}
		for name, ti := range p.Signature().Inputs {
			dims := ti.Shape.Dims()
			for i, d := range dims {
				if d < 0 || d > 8 {
					dims[i] = 2
				}
			}
			in[name] = tensor.New(ti.DType, dims...)
		}
		p.Predict(context.Background(), in) // may fail, must not panic
	})
}
