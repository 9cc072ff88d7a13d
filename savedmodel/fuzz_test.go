package savedmodel_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
// them: Load must fail cleanly or return a predictor whose inputs check.
// The seeds are a real export of the small model.
//
// The directory is made once per process and the files are overwritten,
// and only CheckInputs is run (predictions on loaded exports are tested by
// the package's other tests): a temporary directory per execution and a
// prediction, whose executor goroutines make the coverage differ from one
// run of the same input to the next, stall the fuzzer (a few executions,
// then none) as it keeps minimising inputs it cannot reproduce. Without
// fix, almost every mutation of graph.pb or variables.bin fails its
// checksum in model.json; with fix set, model.json records the fuzzed files' sizes and checksums, so
// that the mutations reach the decoders behind them.
func FuzzLoad(f *testing.F) {
	b, err := savedmodeltest.Small(1)
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	src := filepath.Join(f.TempDir(), "1")
	if err := savedmodel.Write(src, b.Model); err != nil {
		f.Fatal(err)
	}
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			f.Fatal(err)
		}
		return data
	}
	md, gr, vars := read("model.json"), read("graph.pb"), read("variables.bin")
	f.Add(md, gr, vars, false)
	f.Add(md, gr[:len(gr)/2], vars, true)
	f.Add(md, gr, vars[:len(vars)-3], true)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, md, gr, vars []byte, fix bool) {
		if fix {
			md = fixMetadata(md, gr, vars)
		}
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
		if err := p.CheckInputs(in); err != nil && !errors.Is(err, savedmodel.ErrBadInput) {
			t.Fatalf("CheckInputs: %v", err)
		}
	})
}

// fixMetadata sets the sizes and SHA-256 sums that model.json records to
// those of gr and vars; metadata that does not parse is returned as is.
func fixMetadata(md, gr, vars []byte) []byte {
	var m map[string]any
	if json.Unmarshal(md, &m) != nil {
		return md
	}
	info := func(b []byte) map[string]any {
		sum := sha256.Sum256(b)
		return map[string]any{"size": len(b), "sha256": hex.EncodeToString(sum[:])}
	}
	m["files"] = map[string]any{"graph.pb": info(gr), "variables.bin": info(vars)}
	out, err := json.Marshal(m)
	if err != nil {
		return md
	}
	return out
}
