package estimator_test

import (
	"context"
	"io"
	"testing"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/taskgraph"
	"github.com/distflow/distflow/estimator"

	_ "github.com/distflow/distflow/device/sim" // the simulated accelerator
)

// TestDeviceOptionsReachTheDevice: RunConfig.DeviceOptions are how the
// estimator's devices run a step: with VariablesOnDevice the model's
// variables live in the device's memory (its peak grows by their bytes),
// and the model trains the same.
func TestDeviceOptionsReachTheDevice(t *testing.T) {
	p, err := device.Lookup("sim")
	if err != nil {
		t.Fatal(err)
	}
	train := func(opts taskgraph.Options) (peak int64, w float64) {
		devs, err := p.Open(device.Options{Count: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer devs[0].Close()
		est, err := estimator.New(linearModel, estimator.RunConfig{Seed: 1, Progress: io.Discard, Devices: devs, DeviceOptions: opts})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := est.Train(context.Background(), linearInput(1000, true), estimator.Stop{MaxSteps: 300}); err != nil {
			t.Fatal(err)
		}
		v, err := est.VariableValue("w")
		if err != nil {
			t.Fatal(err)
		}
		return devs[0].Allocator().Stats().Peak, v.Float64At(0)
	}
	hostPeak, hostW := train(taskgraph.Options{})
	devPeak, devW := train(taskgraph.Options{VariablesOnDevice: true})
	// w and b, and the global step: a few bytes, each its own allocation.
	if devPeak <= hostPeak {
		t.Errorf("device peak %d bytes with the variables on the device, %d without; want more", devPeak, hostPeak)
	}
	if hostW != devW {
		t.Errorf("w = %v with the variables on the device, %v without; want the same", devW, hostW)
	}
}
