package taskgraph

// Options are how a task's accelerators run its steps, as a task's
// configuration carries them (worker.Config, server.Config,
// estimator.RunConfig) to each Config it makes; the zero value is the
// default. DISTFLOW_GPU_REPLAY=0, DISTFLOW_GPU_RANDOM=1 and
// DISTFLOW_GPU_VARIABLES=1 in the environment set them for every task
// graph of a process, for a run from the command line.
type Options struct {
	// Eager: Config.Eager, every step kernel by kernel.
	Eager bool
	// RandomOnDevice: Config.RandomOnDevice, dropout's and the other
	// random ops' draws on the device.
	RandomOnDevice bool
	// VariablesOnDevice: Config.VariablesOnDevice, the variables placed
	// on an accelerator in its memory.
	VariablesOnDevice bool
}

// With is c with o's options set too (an option c sets stays set).
func (c Config) With(o Options) Config {
	c.Eager = c.Eager || o.Eager
	c.RandomOnDevice = c.RandomOnDevice || o.RandomOnDevice
	c.VariablesOnDevice = c.VariablesOnDevice || o.VariablesOnDevice
	return c
}
