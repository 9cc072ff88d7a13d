package serving

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/distflow/distflow/tensor"
)

// errBadRequest is wrapped by every decoding error: the answer is a 400.
var errBadRequest = errors.New("bad request")

const defaultSignature = "serving_default"

// request is a decoded predict request.
type request struct {
	// rows is true for the row format ("instances"), false for the
	// columnar one ("inputs").
	rows   bool
	n      int // instances in the row format
	inputs map[string]*tensor.Tensor
}

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// appendTensor appends t as nested JSON lists. float32 values get the
// shortest decimal form that reads back as the same float32, so a client
// parsing them as float32 gets the exact bits; NaN and infinities are written
// NaN, Infinity and -Infinity, as TensorFlow Serving does.
func appendTensor(b []byte, t *tensor.Tensor) []byte {
	return appendElems(b, t, t.Shape(), 0)
}

// appendRow appends row i of t (a tensor of rank >= 1).
func appendRow(b []byte, t *tensor.Tensor, i int) []byte {
	per := tensor.NumElements(t.Shape()[1:])
	return appendElems(b, t, t.Shape()[1:], i*per)
}

func appendElems(b []byte, t *tensor.Tensor, shape []int, off int) []byte {
	if len(shape) == 0 {
		return appendScalar(b, t, off)
	}
	per := tensor.NumElements(shape[1:])
	b = append(b, '[')
	for j := range shape[0] {
		if j > 0 {
			b = append(b, ',')
		}
		b = appendElems(b, t, shape[1:], off+j*per)
	}
	return append(b, ']')
}

func appendScalar(b []byte, t *tensor.Tensor, i int) []byte {
	switch t.DType() {
	case tensor.Float32:
		return appendFloat(b, float64(t.Float32s()[i]), 32)
	case tensor.Float64:
		return appendFloat(b, t.Float64s()[i], 64)
	case tensor.Int32:
		return strconv.AppendInt(b, int64(t.Int32s()[i]), 10)
	case tensor.Int64:
		return strconv.AppendInt(b, t.Int64s()[i], 10)
	case tensor.Uint8:
		return strconv.AppendUint(b, uint64(t.Uint8s()[i]), 10)
	case tensor.Bool:
		return strconv.AppendBool(b, t.Bools()[i])
	}
	return append(b, "null"...)
}

// appendFloat writes f as encoding/json does for a float of the given size.
func appendFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
		format = 'e'
	}
	return strconv.AppendFloat(b, f, format, -1, bits)
}

// encodeResponse writes the predict answer for req: {"predictions": [...]}
// in the row format (one entry per instance: the bare value with a single
// output, an object keyed by output name with several), {"outputs": ...} in
// the columnar one (the bare tensor or an object of tensors), appended to b.
func encodeResponse(b []byte, req *request, out map[string]*tensor.Tensor) ([]byte, error) {
	var names []string
	if len(out) <= 8 {
		names = make([]string, 0, 8) // on the stack
	}
	for k := range out {
		names = append(names, k)
	}
	slices.Sort(names)
	if !req.rows {
		b = append(b, `{"outputs":`...)
		if len(names) == 1 {
			b = appendTensor(b, out[names[0]])
		} else {
			b = append(b, '{')
			for i, name := range names {
				if i > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendQuote(b, name)
				b = append(b, ':')
				b = appendTensor(b, out[name])
			}
			b = append(b, '}')
		}
		return append(b, "}\n"...), nil
	}
	for _, name := range names {
		if s := out[name].Shape(); len(s) == 0 || s[0] != req.n {
			return nil, fmt.Errorf("output %q has shape %v: the row format ('instances') needs every output to have %d rows (use the columnar format, 'inputs')", name, s, req.n)
		}
	}
	b = append(b, `{"predictions":[`...)
	for r := range req.n {
		if r > 0 {
			b = append(b, ',')
		}
		if len(names) == 1 {
			b = appendRow(b, out[names[0]], r)
			continue
		}
		b = append(b, '{')
		for i, name := range names {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, name)
			b = append(b, ':')
			b = appendRow(b, out[name], r)
		}
		b = append(b, '}')
	}
	return append(b, "]}\n"...), nil
}
