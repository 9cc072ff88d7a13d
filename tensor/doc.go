// Package tensor holds distflow's data: dense, row-major n-dimensional
// arrays (Tensor) of a DType, and the possibly partial Shape known while a
// graph is built.
//
//	t := tensor.MustFromSlice([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
//	t.Float32s()[4] = 0            // kernels read and write the data in place
//	b, _ := t.MarshalBinary()      // the encoding the wire and checkpoints reuse
//	s := tensor.MakeShape(-1, 784) // "[?,784]": a batch of unknown size
//
// float32 is the compute type; float64, int32, int64, bool and uint8 serve
// labels, indices, masks and raw image bytes. The package depends on nothing
// else in distflow.
package tensor
