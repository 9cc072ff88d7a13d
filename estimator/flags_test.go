package estimator

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"strings"
	"testing"

	"github.com/distflow/distflow/data"
	_ "github.com/distflow/distflow/device/sim" // --gpu-platform sim
	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/layers"
	"github.com/distflow/distflow/tensor"
	"github.com/distflow/distflow/train"
)

// Run's line on the chief of a single process: the strategy, the global
// step, the export and the metrics asked for, and nothing else; a metric
// the evaluation lacks is an error that names those it has.
func TestFlagsRunPrintsTheChiefsResult(t *testing.T) {
	t.Setenv("TF_CONFIG", "")
	model, input := flagsModel()
	ctx := context.Background()
	f := Flags{Strategy: "async", Steps: 20, Export: t.TempDir()}
	var out bytes.Buffer
	if err := f.run(ctx, &out, model, input(true), input(false), []string{"mse", "mae"}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("printed %q (%v); want one line of JSON", out.String(), err)
	}
	for _, k := range []string{"strategy", "global_step", "export", "mse", "mae"} {
		if _, ok := got[k]; !ok {
			t.Errorf("printed %s; want %q", out.String(), k)
		}
	}
	if len(got) != 5 || got["strategy"] != "async" || got["global_step"] != float64(20) || !strings.HasPrefix(got["export"].(string), f.Export) {
		t.Errorf("printed %s; want the strategy async, global step 20, the export under %s, and mse and mae only", out.String(), f.Export)
	}

	f = Flags{Strategy: "async", Steps: 20}
	out.Reset()
	err := f.run(ctx, &out, model, input(true), input(false), []string{"accuracy"})
	if err == nil || !strings.Contains(err.Error(), `no metric "accuracy"`) || !strings.Contains(err.Error(), `"mse"`) || out.Len() != 0 {
		t.Errorf("a metric the evaluation lacks: error %v, printed %q; want an error naming it and those there are, nothing printed", err, out.String())
	}
}

// TestFlagsGPUs: a program's --gpus flags open its GPUs, as distflow
// train's: two towers on two logical GPUs of a simulated card train, and
// GPUs the machine lacks, or a share of memory that leaves one none, are
// refused, naming the flag.
func TestFlagsGPUs(t *testing.T) {
	t.Setenv("TF_CONFIG", "")
	model, input := flagsModel()
	ctx := context.Background()
	parse := func(args ...string) *Flags {
		f := &Flags{Steps: 20}
		fs := flag.NewFlagSet("program", flag.ContinueOnError)
		f.Register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := parse("--gpus", "2", "--gpu-platform", "sim", "--logical-gpus", "2", "--first-gpu", "1")
	if g := f.GPUs; g.Count != 2 || g.Platform != "sim" || g.Logical != 2 || !g.FirstSet || g.First != 1 {
		t.Fatalf("parsed %+v", g)
	}
	f.GPUs.FirstSet = false
	res, err := f.TrainAndEvaluate(ctx, model, input(true), input(false))
	if err != nil {
		t.Fatal(err)
	}
	if res.GlobalStep != 20 {
		t.Errorf("two towers: global step %d; want 20", res.GlobalStep)
	}
	for args, want := range map[string]string{
		"--gpus 9 --gpu-platform sim":                            "--gpus 9: this machine has 2 sim card(s)",
		"--gpus 1 --gpu-platform sim --gpu-memory-fraction 1e-9": "--gpu-memory-fraction 1e-09: leaves GPU:0 no memory",
		"--gpus 1 --gpu-platform nosuch":                         "--gpu-platform",
		"--gpus -1":                                              "--gpus -1",
	} {
		_, err := parse(strings.Fields(args)...).TrainAndEvaluate(ctx, model, input(true), input(false))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error naming %q", args, err, want)
		}
	}
}

// flagsModel is a linear regression of y = 2x + 1 on 40 examples, and
// its input in batches of 10, repeated or not.
func flagsModel() (ModelFn, func(repeat bool) InputFn) {
	x, y := tensor.New(tensor.Float32, 40, 1), tensor.New(tensor.Float32, 40, 1)
	for i := range 40 {
		x.Float32s()[i] = float32(i)/20 - 1
		y.Float32s()[i] = 2*x.Float32s()[i] + 1
	}
	input := func(repeat bool) InputFn {
		return func(InputContext) (*Input, error) {
			ds, err := data.FromTensors(x, y)
			if err != nil {
				return nil, err
			}
			if repeat {
				ds = ds.Repeat(-1)
			}
			return &Input{Dataset: ds.Batch(10, repeat), Features: []string{"x"}}, nil
		}
	}
	model := func(s *graph.Scope, f Features, labels graph.Output, mode Mode) (*Spec, error) {
		pred := layers.Dense{Units: 1}.Apply(s, f.Get(s, "x"), mode == Train)
		return RegressionHead{Optimizer: train.NewGradientDescent(0.1), Key: "y"}.Spec(s, pred, labels, mode)
	}
	return model, input
}
