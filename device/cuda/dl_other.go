//go:build !linux

package cuda

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/distflow/distflow/device"
)

var errNotLinux = fmt.Errorf("cuda: %w: the CUDA platform runs on linux only, not %s", device.ErrUnavailable, runtime.GOOS)

func dlopen(string) (uintptr, error) { return 0, errNotLinux }

func dlsym(uintptr, string) (uintptr, error) { return 0, errors.New("cuda: no dynamic loading") }

func ccall(uintptr, ...uintptr) uintptr { panic("cuda: ccall without a loaded library") }

const canLoad = false
