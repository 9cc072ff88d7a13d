package cuda

import "runtime"

// keepAlive keeps Go memory handed to C by address alive until this call.
func keepAlive(xs ...any) {
	for _, x := range xs {
		runtime.KeepAlive(x)
	}
}
