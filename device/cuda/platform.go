package cuda

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"unsafe"

	"github.com/distflow/distflow/device"
)

// Name is the platform's registered name.
const Name = "cuda"

// Platform is the CUDA platform (device.Platform). Its libraries are
// loaded on the first Probe or Open, once; its kernels are compiled once
// per compute capability.
type Platform struct {
	drvOnce sync.Once
	drv     *driver
	drvErr  error

	nvOnce sync.Once
	nv     *nvrtc
	nvErr  error

	blasOnce sync.Once
	blas     *cublas
	blasErr  error

	imgMu  sync.Mutex
	images map[imageKey][]byte
}

type imageKey struct {
	arch  int
	cubin bool
}

func init() {
	device.RegisterPlatform(&Platform{})
	registerKernels()
}

// Name returns "cuda".
func (p *Platform) Name() string { return Name }

func (p *Platform) driver() (*driver, error) {
	p.drvOnce.Do(func() { p.drv, p.drvErr = loadDriver() })
	return p.drv, p.drvErr
}

func (p *Platform) nvrtc() (*nvrtc, error) {
	p.nvOnce.Do(func() { p.nv, p.nvErr = loadNVRTC() })
	return p.nv, p.nvErr
}

// cublas returns cuBLAS, or an error if it cannot be loaded or
// DISTFLOW_CUDA_NO_CUBLAS is set; MatMul then runs the platform's own
// kernel.
func (p *Platform) cublas() (*cublas, error) {
	p.blasOnce.Do(func() {
		if os.Getenv("DISTFLOW_CUDA_NO_CUBLAS") != "" {
			p.blasErr = fmt.Errorf("cuda: cuBLAS disabled by DISTFLOW_CUDA_NO_CUBLAS")
			return
		}
		p.blas, p.blasErr = loadCublas()
		if p.blasErr != nil {
			slog.Warn("cuda: MatMul runs the platform's own GEMM kernel", "err", p.blasErr)
		}
	})
	return p.blas, p.blasErr
}

// Probe loads the driver and returns the number of visible cards. Without a
// driver or a card its error wraps device.ErrUnavailable.
func (p *Platform) Probe() (int, error) {
	drv, err := p.driver()
	if err != nil {
		return 0, err
	}
	n, err := drv.deviceCount()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("cuda: %w: the driver (%s) sees no GPU (CUDA_VISIBLE_DEVICES=%q)",
			device.ErrUnavailable, drv.lib.path, os.Getenv("CUDA_VISIBLE_DEVICES"))
	}
	return n, nil
}

// Open opens the devices opts asks for: opts.Count devices (0: one per card,
// times opts.Logical), spread over the cards in order, each logical device
// with its share of its card's memory limit and a stream of its own. It
// compiles and loads the kernels, so a card that cannot run them is not
// opened.
func (p *Platform) Open(opts device.Options) (devs []device.Device, err error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	cards, err := p.Probe()
	if err != nil {
		return nil, err
	}
	per := max(opts.Logical, 1)
	n := opts.Count
	if n == 0 {
		n = cards*per - opts.First
	}
	if opts.First+n > cards*per {
		return nil, fmt.Errorf("cuda: devices %d to %d asked for, but %d cards of %d logical devices make %d: %w",
			opts.First, opts.First+n-1, cards, per, cards*per, device.ErrUnavailable)
	}
	defer func() {
		if err != nil {
			for _, d := range devs {
				d.Close()
			}
			devs = nil
		}
	}()
	var cur *card
	for i := range n {
		logical := opts.First + i
		// The first device of this process on its card opens the card.
		firstOnCard := i == 0 || logical%per == 0
		if firstOnCard {
			if cur, err = p.openCard(logical / per); err != nil {
				return devs, err
			}
		}
		d, err := newDevice(p, cur, "GPU:"+strconv.Itoa(i), logical, opts.Limit(cur.info.total, per), allowTF32(opts))
		if err != nil {
			if firstOnCard {
				cur.release() // no device holds the card yet
			}
			return devs, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// allowTF32 reports whether devices opened with opts run their float32
// products on TF32 tensor cores: opts.AllowTF32, or DISTFLOW_CUDA_TF32=1.
func allowTF32(opts device.Options) bool {
	return opts.AllowTF32 || os.Getenv("DISTFLOW_CUDA_TF32") == "1"
}

// card is one physical GPU as the devices on it share it: its primary
// context and the module of kernels loaded into it.
type card struct {
	p       *Platform
	drv     *driver
	ordinal int
	info    cardInfo
	ctx     uintptr
	module  uintptr

	mu   sync.Mutex
	refs int // open devices; the last one's Close releases the card
	fns  map[string]uintptr
}

// openCard retains the primary context of the card with visible ordinal i
// and loads the kernels into it. The card has no references yet.
func (p *Platform) openCard(i int) (*card, error) {
	drv, err := p.driver()
	if err != nil {
		return nil, err
	}
	info, err := drv.cardInfo(i)
	if err != nil {
		return nil, err
	}
	c := &card{p: p, drv: drv, ordinal: i, info: info, fns: map[string]uintptr{}}
	name := c.name()
	if err := drv.check(name, "cuDevicePrimaryCtxRetain", ccall(drv.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&c.ctx)), uintptr(info.dev))); err != nil {
		return nil, err
	}
	if err := c.loadModule(); err != nil {
		ccall(drv.cuDevicePrimaryCtxRelease, uintptr(info.dev))
		return nil, err
	}
	return c, nil
}

func (c *card) name() string { return fmt.Sprintf("card %d (%s)", c.ordinal, c.info.name) }

// do runs f with the card's context current (see driver.withContext).
func (c *card) do(dev string, f func() error) error { return c.drv.withContext(dev, c.ctx, f) }

func (c *card) retain() {
	c.mu.Lock()
	c.refs++
	c.mu.Unlock()
}

// release drops a device's reference; the last one unloads the module and
// releases the primary context.
func (c *card) release() error {
	c.mu.Lock()
	c.refs--
	last := c.refs <= 0
	c.mu.Unlock()
	if !last {
		return nil
	}
	err := c.do(c.name(), func() error {
		if c.module != 0 {
			return c.drv.check(c.name(), "cuModuleUnload", ccall(c.drv.cuModuleUnload, c.module))
		}
		return nil
	})
	if rerr := c.drv.check(c.name(), "cuDevicePrimaryCtxRelease", ccall(c.drv.cuDevicePrimaryCtxRelease, uintptr(c.info.dev))); err == nil {
		err = rerr
	}
	return err
}

// function returns the kernel called name in the card's module.
func (c *card) function(dev, name string) (uintptr, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.fns[name]; ok {
		return f, nil
	}
	var f uintptr
	cname := cstr(name)
	err := c.do(dev, func() error {
		return c.drv.check(dev, "cuModuleGetFunction("+name+")",
			ccall(c.drv.cuModuleGetFunction, uintptr(unsafe.Pointer(&f)), c.module, uintptr(unsafe.Pointer(&cname[0]))))
	})
	keepAlive(cname)
	if err != nil {
		return 0, err
	}
	c.fns[name] = f
	return f, nil
}
