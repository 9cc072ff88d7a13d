package cuda

import (
	"testing"

	"github.com/distflow/distflow/device"
	"github.com/distflow/distflow/device/devicetest"
)

// TestConformance runs the device conformance suite on the GPUs of this
// machine; it skips where there is none.
func TestConformance(t *testing.T) {
	p, err := device.Lookup(Name)
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.Probe()
	if err != nil {
		t.Skipf("no CUDA GPU here: %v", err)
	}
	t.Logf("%d CUDA card(s)", n)
	devicetest.Run(t, p)
}
