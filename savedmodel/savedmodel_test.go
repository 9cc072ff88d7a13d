package savedmodel_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/savedmodel/savedmodeltest"
	"github.com/distflow/distflow/tensor"
)

var builders = []struct {
	name  string
	build func() (*savedmodeltest.Built, error)
	input func(n int, seed uint64) map[string]*tensor.Tensor
}{
	{"small", func() (*savedmodeltest.Built, error) { return savedmodeltest.Small(1) }, smallInput},
	{"mlp", func() (*savedmodeltest.Built, error) { return savedmodeltest.MLP(1) }, imagesInput},
	{"cnn", func() (*savedmodeltest.Built, error) { return savedmodeltest.CNN(1) }, imagesInput},
}

func smallInput(n int, seed uint64) map[string]*tensor.Tensor {
	x := make([]float32, 3*n)
	k := make([]int32, n)
	for i := range x {
		x[i] = float32(i)*0.25 - float32(seed)
	}
	for i := range k {
		k[i] = int32(i) - 3
	}
	return map[string]*tensor.Tensor{"x": tensor.MustFromSlice(x, n, 3), "k": tensor.MustFromSlice(k, n)}
}

func imagesInput(n int, seed uint64) map[string]*tensor.Tensor {
	return map[string]*tensor.Tensor{"images": savedmodeltest.Images(n, seed)}
}

// sameBits reports whether two tensors have the same dtype, shape and bytes
// (for floats: the same bits, NaNs included).
func sameBits(a, b *tensor.Tensor) bool {
	if a.DType() != b.DType() || !tensor.MakeShape(a.Shape()...).Equal(tensor.MakeShape(b.Shape()...)) {
		return false
	}
	return string(a.RawBytes()) == string(b.RawBytes())
}

func build(t *testing.T, f func() (*savedmodeltest.Built, error)) *savedmodeltest.Built {
	t.Helper()
	b, err := f()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestRoundTripBitForBit(t *testing.T) {
	ctx := context.Background()
	for _, c := range builders {
		t.Run(c.name, func(t *testing.T) {
			b := build(t, c.build)
			base := t.TempDir()
			v, dir, err := savedmodel.WriteVersion(base, b.Model)
			if err != nil {
				t.Fatal(err)
			}
			if v != 1 || dir != filepath.Join(base, "1") {
				t.Fatalf("WriteVersion = %d, %s; want 1, %s/1", v, dir, base)
			}
			p, err := savedmodel.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if p.GlobalStep() != b.Model.GlobalStep {
				t.Errorf("GlobalStep = %d, want %d", p.GlobalStep(), b.Model.GlobalStep)
			}
			sig := p.Signature()
			for name, o := range b.Model.Inputs {
				ti := sig.Inputs[name]
				if ti.Name != o.Name() || ti.DType != o.DType() || !ti.Shape.Equal(o.Shape()) {
					t.Errorf("signature input %q = %+v, want %s %v%v", name, ti, o.Name(), o.DType(), o.Shape())
				}
			}
			if len(sig.Outputs) != len(b.Model.Outputs) {
				t.Errorf("signature outputs %v, want %d", sig.OutputNames(), len(b.Model.Outputs))
			}
			for _, n := range []int{1, 5} {
				in := c.input(n, uint64(n))
				want, err := b.Run(ctx, in)
				if err != nil {
					t.Fatal(err)
				}
				got, err := p.Predict(ctx, in)
				if err != nil {
					t.Fatal(err)
				}
				for name, w := range want {
					if !sameBits(got[name], w) {
						t.Errorf("batch %d: output %q differs from the in-process session:\n got %v\nwant %v", n, name, got[name], w)
					}
				}
			}
			// Only what prediction needs was written.
			gb, err := os.ReadFile(filepath.Join(dir, "graph.pb"))
			if err != nil {
				t.Fatal(err)
			}
			gd := &pb.GraphDef{}
			if err := proto.Unmarshal(gb, gd); err != nil {
				t.Fatal(err)
			}
			for _, nd := range gd.Node {
				if strings.HasPrefix(nd.Name, "train/") || nd.Op == "Assign" || nd.Op == "ApplyGradientDescent" || strings.Contains(nd.Name, "Initializer") {
					t.Errorf("the export kept training node %s (%s)", nd.Name, nd.Op)
				}
				if nd.Device != "" {
					t.Errorf("node %s kept device %q", nd.Name, nd.Device)
				}
			}
		})
	}
}

// TestBatchingKeepsBits checks that a row's result does not depend on the
// batch it is computed in: the server merges requests into batches.
func TestBatchingKeepsBits(t *testing.T) {
	ctx := context.Background()
	for _, c := range builders[1:] {
		t.Run(c.name, func(t *testing.T) {
			b := build(t, c.build)
			p := writeLoad(t, b.Model)
			all := savedmodeltest.Images(64, 99)
			alone := make([]map[string]*tensor.Tensor, 64)
			for i := range alone {
				var err error
				alone[i], err = p.Predict(ctx, map[string]*tensor.Tensor{"images": savedmodeltest.Rows(all, i, i+1)})
				if err != nil {
					t.Fatal(err)
				}
			}
			for _, n := range []int{1, 7, 64} {
				got, err := p.Predict(ctx, map[string]*tensor.Tensor{"images": savedmodeltest.Rows(all, 0, n)})
				if err != nil {
					t.Fatal(err)
				}
				for name, out := range got {
					for i := range n {
						if row := savedmodeltest.Rows(out, i, i+1); !sameBits(row, alone[i][name]) {
							t.Errorf("batch of %d: row %d of %q differs from the row predicted alone:\n got %v\nwant %v", n, i, name, row, alone[i][name])
						}
					}
				}
			}
		})
	}
}

func TestVersions(t *testing.T) {
	b := build(t, func() (*savedmodeltest.Built, error) { return savedmodeltest.Small(1) })
	base := t.TempDir()
	if _, err := savedmodel.Versions(filepath.Join(base, "missing")); !errors.Is(err, savedmodel.ErrNotFound) {
		t.Errorf("Versions of a missing base: %v, want ErrNotFound", err)
	}
	if _, _, err := savedmodel.LoadLatest(base); !errors.Is(err, savedmodel.ErrNotFound) {
		t.Errorf("LoadLatest of an empty base: %v, want ErrNotFound", err)
	}
	for want := int64(1); want <= 2; want++ {
		if v, _, err := savedmodel.WriteVersion(base, b.Model); err != nil || v != want {
			t.Fatalf("WriteVersion = %d, %v; want %d", v, err, want)
		}
	}
	// Noise: a half-written version, a temp dir, a file, non-canonical names.
	for _, d := range []string{"3", ".4.tmp-123", "abc", "007", "-5"} {
		if err := os.Mkdir(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "9x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	vs, err := savedmodel.Versions(base)
	if err != nil || len(vs) != 2 || vs[0] != 1 || vs[1] != 2 {
		t.Fatalf("Versions = %v, %v; want [1 2]", vs, err)
	}
	p, v, err := savedmodel.LoadLatest(base)
	if err != nil || v != 2 {
		t.Fatalf("LoadLatest = %d, %v; want 2", v, err)
	}
	p.Close()
	// The next version skips the half-written 3 rather than overwrite it.
	if v, _, err := savedmodel.WriteVersion(base, b.Model); err != nil || v != 4 {
		t.Fatalf("WriteVersion after a half-written 3 = %d, %v; want 4", v, err)
	}
	// A corrupt newest version makes LoadLatest fall back to an older one.
	corrupt(t, filepath.Join(base, "4", "variables.bin"))
	if p, v, err := savedmodel.LoadLatest(base); err != nil || v != 2 {
		t.Fatalf("LoadLatest with a corrupt 4 = %d, %v; want 2", v, err)
	} else {
		p.Close()
	}
	if err := savedmodel.Write(filepath.Join(base, "2"), b.Model); !errors.Is(err, savedmodel.ErrExist) {
		t.Errorf("Write over version 2: %v, want ErrExist", err)
	}
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".2.tmp") {
			t.Errorf("a failed Write left %s behind", e.Name())
		}
	}
}

func corrupt(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// editMetadata rewrites model.json through f.
func editMetadata(t *testing.T, dir string, f func(m map[string]any)) {
	t.Helper()
	path := filepath.Join(dir, "model.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// rewriteGraph replaces graph.pb with f(graph) and fixes the checksum, as a
// hostile writer would.
func rewriteGraph(t *testing.T, dir string, f func(gd *pb.GraphDef)) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "graph.pb"))
	if err != nil {
		t.Fatal(err)
	}
	gd := &pb.GraphDef{}
	if err := proto.Unmarshal(b, gd); err != nil {
		t.Fatal(err)
	}
	f(gd)
	if b, err = proto.Marshal(gd); err != nil {
		t.Fatal(err)
	}
	rewriteFile(t, dir, "graph.pb", b)
}

func rewriteFile(t *testing.T, dir, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256Hex(b)
	editMetadata(t, dir, func(m map[string]any) {
		m["files"].(map[string]any)[name] = map[string]any{"size": len(b), "sha256": sum}
	})
}

func TestLoadRejectsDamagedExports(t *testing.T) {
	b := build(t, func() (*savedmodeltest.Built, error) { return savedmodeltest.Small(1) })
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string) string // returns the dir to load
		want   error
		msg    string
	}{
		{"missing dir", func(t *testing.T, dir string) string { return dir + "-nope" }, savedmodel.ErrNotFound, "does not exist"},
		{"no metadata", func(t *testing.T, dir string) string {
			os.Remove(filepath.Join(dir, "model.json"))
			return dir
		}, savedmodel.ErrIncomplete, "half-written"},
		{"metadata not JSON", func(t *testing.T, dir string) string {
			os.WriteFile(filepath.Join(dir, "model.json"), []byte("{\"format\":"), 0o644)
			return dir
		}, savedmodel.ErrIncomplete, "model.json"},
		{"unknown format version", func(t *testing.T, dir string) string {
			editMetadata(t, dir, func(m map[string]any) { m["format_version"] = 99 })
			return dir
		}, savedmodel.ErrUnsupported, "format version 99"},
		{"unknown format", func(t *testing.T, dir string) string {
			editMetadata(t, dir, func(m map[string]any) { m["format"] = "tf.savedmodel" })
			return dir
		}, savedmodel.ErrUnsupported, "tf.savedmodel"},
		{"unknown field", func(t *testing.T, dir string) string {
			editMetadata(t, dir, func(m map[string]any) { m["assets"] = []string{"../../etc/passwd"} })
			return dir
		}, savedmodel.ErrIncomplete, "assets"},
		{"graph missing", func(t *testing.T, dir string) string {
			os.Remove(filepath.Join(dir, "graph.pb"))
			return dir
		}, savedmodel.ErrIncomplete, "graph.pb is missing"},
		{"graph truncated", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "graph.pb")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)-7], 0o644)
			return dir
		}, savedmodel.ErrIncomplete, "truncated"},
		{"graph grown", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "graph.pb")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, append(b, 0), 0o644)
			return dir
		}, savedmodel.ErrIncomplete, "graph.pb"},
		{"variables corrupt", func(t *testing.T, dir string) string {
			corrupt(t, filepath.Join(dir, "variables.bin"))
			return dir
		}, savedmodel.ErrIncomplete, "checksum mismatch"},
		{"variables garbage with a good checksum", func(t *testing.T, dir string) string {
			rewriteFile(t, dir, "variables.bin", []byte("DFVARS\x00\x01\x05\xff\xff\xff"))
			return dir
		}, savedmodel.ErrIncomplete, "variables.bin"},
		{"huge recorded size", func(t *testing.T, dir string) string {
			editMetadata(t, dir, func(m map[string]any) {
				m["files"].(map[string]any)["graph.pb"].(map[string]any)["size"] = int64(1) << 50
			})
			return dir
		}, savedmodel.ErrIncomplete, "out of range"},
		{"signature names a missing tensor", func(t *testing.T, dir string) string {
			editMetadata(t, dir, func(m map[string]any) {
				m["signature"].(map[string]any)["outputs"].(map[string]any)["y"].(map[string]any)["name"] = "nope:0"
			})
			return dir
		}, savedmodel.ErrIncomplete, `"nope"`},
		{"signature input is not a placeholder", func(t *testing.T, dir string) string {
			editMetadata(t, dir, func(m map[string]any) {
				in := m["signature"].(map[string]any)["inputs"].(map[string]any)
				in["z"] = map[string]any{"name": "W:0", "dtype": "float32", "shape": []int{3, 2}}
			})
			return dir
		}, savedmodel.ErrIncomplete, "not a Placeholder"},
		{"signature dtype differs", func(t *testing.T, dir string) string {
			editMetadata(t, dir, func(m map[string]any) {
				m["signature"].(map[string]any)["inputs"].(map[string]any)["x"].(map[string]any)["dtype"] = "int64"
			})
			return dir
		}, savedmodel.ErrIncomplete, "int64"},
		{"graph with a saver", func(t *testing.T, dir string) string {
			rewriteGraph(t, dir, func(gd *pb.GraphDef) {
				gd.Node = append(gd.Node, &pb.NodeDef{Name: "evil", Op: "SaveVariables"})
			})
			return dir
		}, savedmodel.ErrUnsupported, "SaveVariables"},
		{"graph with an unknown op", func(t *testing.T, dir string) string {
			rewriteGraph(t, dir, func(gd *pb.GraphDef) { gd.Node[0].Op = "Frobnicate" })
			return dir
		}, savedmodel.ErrUnsupported, "Frobnicate"},
		{"graph from the future", func(t *testing.T, dir string) string {
			rewriteGraph(t, dir, func(gd *pb.GraphDef) { gd.Version = 1000 })
			return dir
		}, savedmodel.ErrUnsupported, "version 1000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "1")
			if err := savedmodel.Write(dir, b.Model); err != nil {
				t.Fatal(err)
			}
			p, err := savedmodel.Load(c.damage(t, dir))
			if err == nil {
				p.Close()
				t.Fatal("Load succeeded")
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("Load: %v\nwant an error wrapping %v and mentioning %q", err, c.want, c.msg)
			}
			if !strings.HasPrefix(err.Error(), "savedmodel: ") {
				t.Errorf("error %q does not start with the package name", err)
			}
		})
	}
}

func TestPredictRejectsBadInputs(t *testing.T) {
	b := build(t, func() (*savedmodeltest.Built, error) { return savedmodeltest.Small(1) })
	p := writeLoad(t, b.Model)
	good := smallInput(2, 0)
	with := func(name string, v *tensor.Tensor) map[string]*tensor.Tensor {
		m := map[string]*tensor.Tensor{"x": good["x"], "k": good["k"]}
		if v == nil {
			delete(m, name)
		} else {
			m[name] = v
		}
		return m
	}
	cases := []struct {
		name   string
		inputs map[string]*tensor.Tensor
		msgs   []string
	}{
		{"unknown input", with("z", tensor.New(tensor.Float32, 1)), []string{`unknown input "z"`, "k, x"}},
		{"missing input", with("k", nil), []string{`missing input "k"`}},
		{"wrong dtype", with("k", tensor.New(tensor.Float32, 2)), []string{`input "k"`, "float32 given", "int32 wanted"}},
		{"wrong shape", with("x", tensor.New(tensor.Float32, 2, 4)), []string{`input "x"`, "[2,4] given", "[?,3] wanted"}},
		{"wrong rank", with("x", tensor.New(tensor.Float32, 6)), []string{`input "x"`, "[6] given"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := p.Predict(context.Background(), c.inputs)
			if !errors.Is(err, savedmodel.ErrBadInput) {
				t.Fatalf("Predict: %v, want ErrBadInput", err)
			}
			for _, m := range c.msgs {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %q", err, m)
				}
			}
		})
	}
	if _, err := p.Predict(context.Background(), good); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, err := p.Predict(context.Background(), good); !errors.Is(err, savedmodel.ErrClosed) {
		t.Errorf("Predict after Close: %v, want ErrClosed", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestWriteRejectsBadModels(t *testing.T) {
	b := build(t, func() (*savedmodeltest.Built, error) { return savedmodeltest.Small(1) })
	g := b.Model.Graph
	cases := []struct {
		name string
		edit func(m *savedmodel.Model)
		msg  string
	}{
		{"no graph", func(m *savedmodel.Model) { m.Graph = nil }, "no graph"},
		{"no outputs", func(m *savedmodel.Model) { m.Outputs = nil }, "at least one input and one output"},
		{"missing variable", func(m *savedmodel.Model) { delete(m.Variables, "W") }, "variable W"},
		{"variable of the wrong shape", func(m *savedmodel.Model) { m.Variables["b"] = tensor.New(tensor.Float32, 3) }, "variable b"},
		{"input is not a placeholder", func(m *savedmodel.Model) { m.Inputs["y"] = m.Outputs["y"] }, `input "y"`},
		{"output needs an unlisted placeholder", func(m *savedmodel.Model) { delete(m.Inputs, "k") }, "placeholder k"},
		{"bad name", func(m *savedmodel.Model) { m.Outputs["a b"] = m.Outputs["y"] }, `"a b"`},
		{"output updates a variable", func(m *savedmodel.Model) {
			s := graph.NewScopeWithGraph(g)
			m.Outputs["z"] = ops.AssignAdd(s, g.Node("W").Output(0), ops.Const(s, tensor.New(tensor.Float32, 3, 2)))
		}, "updates variable W"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := b.Model
			m.Inputs, m.Outputs, m.Variables = clone(m.Inputs), clone(m.Outputs), clone(m.Variables)
			c.edit(&m)
			dir := filepath.Join(t.TempDir(), "1")
			err := savedmodel.Write(dir, m)
			if err == nil || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("Write: %v, want an error mentioning %q", err, c.msg)
			}
			if _, serr := os.Stat(dir); serr == nil {
				t.Errorf("a failed Write created %s", dir)
			}
		})
	}
}

func clone[V any](m map[string]V) map[string]V {
	out := map[string]V{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestPredictConcurrently(t *testing.T) {
	b := build(t, func() (*savedmodeltest.Built, error) { return savedmodeltest.MLP(3) })
	p := writeLoad(t, b.Model)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5 {
				in := imagesInput(1+g, uint64(g*10+i))
				want, err := b.Run(ctx, in)
				if err != nil {
					errs <- err
					return
				}
				got, err := p.Predict(ctx, in)
				if err != nil {
					errs <- err
					return
				}
				if !sameBits(got["probabilities"], want["probabilities"]) || !sameBits(got["classes"], want["classes"]) {
					errs <- errors.New("a concurrent prediction differs from the in-process one")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// writeLoad writes m as an export and loads it; the predictor is closed at
// the end of the test.
func writeLoad(t *testing.T, m savedmodel.Model) *savedmodel.Predictor {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "1")
	if err := savedmodel.Write(dir, m); err != nil {
		t.Fatal(err)
	}
	p, err := savedmodel.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
