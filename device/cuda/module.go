package cuda

import (
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"unsafe"
)

// kernelFS holds the CUDA C sources of the kernels: common.cuh, then every
// .cu file, make one NVRTC program.
//
//go:embed kernels/*.cu kernels/*.cuh
var kernelFS embed.FS

// kernelSource returns the program NVRTC compiles: the shared header, then
// the kernel files in name order, each after a #line directive so that
// compiler messages name the file and line.
func kernelSource() (string, error) {
	var b strings.Builder
	add := func(name string) error {
		src, err := kernelFS.ReadFile("kernels/" + name)
		if err != nil {
			return fmt.Errorf("cuda: kernel source %s: %w", name, err)
		}
		fmt.Fprintf(&b, "#line 1 \"%s\"\n%s\n", name, src)
		return nil
	}
	if err := add("common.cuh"); err != nil {
		return "", err
	}
	files, err := fs.Glob(kernelFS, "kernels/*.cu")
	if err != nil {
		return "", err
	}
	slices.Sort(files)
	for _, f := range files {
		if err := add(strings.TrimPrefix(f, "kernels/")); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

// image returns the kernels compiled for arch (major*10+minor): PTX, or a
// CUBIN if cubin is set. It compiles once per process and key.
func (p *Platform) image(arch int, cubin bool) ([]byte, error) {
	p.imgMu.Lock()
	defer p.imgMu.Unlock()
	key := imageKey{arch, cubin}
	if img, ok := p.images[key]; ok {
		return img, nil
	}
	nv, err := p.nvrtc()
	if err != nil {
		return nil, err
	}
	src, err := kernelSource()
	if err != nil {
		return nil, err
	}
	target := arch
	if archs := nv.supportedArchs(); len(archs) > 0 && !slices.Contains(archs, arch) {
		// A card newer than this NVRTC: the newest virtual architecture
		// below it, whose PTX the driver compiles forward.
		target = 0
		for _, a := range archs {
			if a <= arch && a > target {
				target = a
			}
		}
		if target == 0 || cubin {
			return nil, fmt.Errorf("cuda: NVRTC %d.%d (%s) cannot compile for compute capability %d.%d (it knows %v)",
				nv.major, nv.minor, nv.lib.path, arch/10, arch%10, archs)
		}
	}
	img, err := nv.compile(src, "distflow_kernels.cu", target, cubin)
	if err != nil {
		return nil, fmt.Errorf("cuda: compiling the kernels with NVRTC %d.%d (%s): %w", nv.major, nv.minor, nv.lib.path, err)
	}
	if p.images == nil {
		p.images = map[imageKey][]byte{}
	}
	p.images[key] = img
	return img, nil
}

// loadModule loads the kernels into the card's context: PTX that the driver
// compiles for the card, or, if the driver rejects it (older than NVRTC, or
// without its JIT compiler), a CUBIN NVRTC compiled for the card itself.
func (c *card) loadModule() error {
	arch := c.info.major*10 + c.info.minor
	name := c.name()
	load := func(img []byte) error {
		return c.do(name, func() error {
			err := c.drv.check(name, "cuModuleLoadData", ccall(c.drv.cuModuleLoadData, uintptr(unsafe.Pointer(&c.module)), uintptr(unsafe.Pointer(&img[0]))))
			keepAlive(img)
			return err
		})
	}
	img, err := c.p.image(arch, false)
	if err != nil {
		return err
	}
	err = load(img)
	var ce *Error
	if asError(err, &ce) && slices.Contains([]cuResult{cudaErrorUnsupportedPTX, cudaErrorInvalidPTX, cudaErrorNoBinaryForGPU, cudaErrorJITNotFound}, cuResult(ce.Code)) {
		slog.Info("cuda: the driver rejected NVRTC's PTX; loading a CUBIN", "card", name, "err", err)
		cub, cerr := c.p.image(arch, true)
		if cerr != nil {
			return fmt.Errorf("%w; and no CUBIN: %w", err, cerr)
		}
		err = load(cub)
	}
	return err
}
