package sim_test

import (
	"testing"

	"github.com/distflow/distflow/device/devicetest"
	"github.com/distflow/distflow/device/sim"
)

func TestConformance(t *testing.T) {
	devicetest.Run(t, sim.New(sim.Config{Cards: 2, CardBytes: 1 << 30}))
}
