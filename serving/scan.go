package serving

import (
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/tensor"
)

// The fast decoder reads the common predict requests (numbers and booleans
// in nested lists, plain ASCII keys) straight into tensor buffers, without
// building encoding/json's generic values. It is strict: it accepts a body
// only if decodeGeneral would accept it and produce the same request, and
// gives up (ok false) on anything else, from a string escape to a ragged
// list, leaving the body and its error message to decodeGeneral. It never
// reports an error of its own. FuzzFastDecoder checks the two agree.

// maxListDepth is the deepest nesting of lists in one input's value that
// decodeGeneral accepts (its "more than 32 nested lists").
const maxListDepth = 32

// maxPooledElems bounds the scratch a pooled decoder keeps, so that one huge
// request does not pin its memory.
const maxPooledElems = 1 << 20

var fastPool = sync.Pool{New: func() any { return new(fastDecoder) }}

// fastDecode decodes body as decodeRequest does, or returns ok false when
// the body needs the general decoder (including every body that is in error).
func fastDecode(body []byte, sig savedmodel.Signature, names []string) (req *request, ok bool) {
	if len(names) == 0 || len(names) > 64 {
		return nil, false
	}
	d := fastPool.Get().(*fastDecoder)
	defer d.release()
	d.b, d.i = body, 0
	d.names = names
	d.bs = d.bs[:0]
	for _, name := range names {
		dt := sig.Inputs[name].DType
		switch dt {
		case tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64, tensor.Uint8, tensor.Bool:
		default:
			return nil, false
		}
		d.bs = append(d.bs, d.builder(len(d.bs), dt))
	}
	return d.request()
}

// fastDecoder is a cursor over a body and a tensor builder per input.
type fastDecoder struct {
	b     []byte
	i     int
	names []string
	bs    []*builder
	pool  []*builder // builders kept for reuse, by input index
}

func (d *fastDecoder) builder(k int, dt tensor.DType) *builder {
	if k == len(d.pool) {
		d.pool = append(d.pool, new(builder))
	}
	tb := d.pool[k]
	tb.reset(dt)
	return tb
}

func (d *fastDecoder) release() {
	for _, tb := range d.pool {
		if tb.cap() > maxPooledElems {
			return // drop the whole decoder
		}
	}
	d.b, d.names, d.bs = nil, nil, d.bs[:0]
	fastPool.Put(d)
}

func (d *fastDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips white space and returns the next byte (0 at the end).
func (d *fastDecoder) next() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// key reads a string of printable ASCII without escapes, and the colon
// after it. Anything else (escapes, other bytes) is left to the general
// decoder, which decodes escapes and replaces invalid UTF-8.
func (d *fastDecoder) key() ([]byte, bool) {
	if d.next() != '"' {
		return nil, false
	}
	d.i++
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		if c == '"' {
			k := d.b[start:d.i]
			d.i++
			if d.next() != ':' {
				return nil, false
			}
			d.i++
			return k, true
		}
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return nil, false
		}
		d.i++
	}
	return nil, false
}

// sep reads the ',' or the closing byte after a member of a list or object.
func (d *fastDecoder) sep(closing byte) (more, ok bool) {
	switch d.next() {
	case ',':
		d.i++
		return true, true
	case closing:
		d.i++
		return false, true
	}
	return false, false
}

func (d *fastDecoder) request() (*request, bool) {
	if d.next() != '{' {
		return nil, false
	}
	d.i++
	var sawSig, sawInst, sawCols bool
	req := &request{}
	for {
		k, ok := d.key()
		if !ok {
			return nil, false
		}
		switch string(k) {
		case "signature_name":
			if sawSig {
				return nil, false
			}
			sawSig = true
			s, ok := d.key0()
			if !ok || (s != defaultSignature && s != "") {
				return nil, false
			}
		case "instances":
			if sawInst || sawCols {
				return nil, false
			}
			sawInst = true
			if req.n, ok = d.instances(); !ok {
				return nil, false
			}
			req.rows = true
		case "inputs":
			if sawInst || sawCols {
				return nil, false
			}
			sawCols = true
			if !d.columns() {
				return nil, false
			}
		default:
			return nil, false
		}
		more, ok := d.sep('}')
		if !ok {
			return nil, false
		}
		if !more {
			break
		}
	}
	if d.ws(); d.i != len(d.b) || !(sawInst || sawCols) {
		return nil, false
	}
	req.inputs = make(map[string]*tensor.Tensor, len(d.bs))
	for k, tb := range d.bs {
		t, ok := tb.tensor()
		if !ok {
			return nil, false
		}
		req.inputs[d.names[k]] = t
	}
	return req, true
}

// key0 reads a string value as key does, without the colon.
func (d *fastDecoder) key0() (string, bool) {
	if d.next() != '"' {
		return "", false
	}
	d.i++
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		if c == '"' {
			d.i++
			return string(d.b[start : d.i-1]), true
		}
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return "", false
		}
		d.i++
	}
	return "", false
}

// input returns the index of the input named k.
func (d *fastDecoder) input(k []byte) int {
	for j, name := range d.names {
		if name == string(k) {
			return j
		}
	}
	return -1
}

// instances reads the row format's list: bare values of the one input, or
// objects holding every input once. It returns the number of instances.
func (d *fastDecoder) instances() (int, bool) {
	if d.next() != '[' {
		return 0, false
	}
	open := d.i
	d.i++
	if d.next() != '{' {
		// Bare values: the list itself is the input's tensor.
		if len(d.bs) != 1 {
			return 0, false
		}
		d.i = open
		tb := d.bs[0]
		if !d.value(tb, 0) || tb.shape[0] == 0 {
			return 0, false
		}
		return tb.shape[0], true
	}
	var seen [64]bool
	n := 0
	for _, tb := range d.bs {
		tb.shape = append(tb.shape, -1) // the instances' dimension
	}
	for {
		if d.next() != '{' {
			return 0, false
		}
		d.i++
		clear(seen[:len(d.bs)])
		for {
			k, ok := d.key()
			if !ok {
				return 0, false
			}
			j := d.input(k)
			if j < 0 || seen[j] {
				return 0, false
			}
			seen[j] = true
			if !d.value(d.bs[j], 1) {
				return 0, false
			}
			more, ok := d.sep('}')
			if !ok {
				return 0, false
			}
			if !more {
				break
			}
		}
		for j := range d.bs {
			if !seen[j] {
				return 0, false
			}
		}
		n++
		more, ok := d.sep(']')
		if !ok {
			return 0, false
		}
		if !more {
			break
		}
	}
	for _, tb := range d.bs {
		tb.shape[0] = n
	}
	return n, true
}

// columns reads the columnar format's value: the bare tensor of the one
// input, or an object holding every input once.
func (d *fastDecoder) columns() bool {
	if d.next() != '{' {
		return len(d.bs) == 1 && d.value(d.bs[0], 0)
	}
	d.i++
	var seen [64]bool
	for {
		k, ok := d.key()
		if !ok {
			return false
		}
		j := d.input(k)
		if j < 0 || seen[j] {
			return false
		}
		seen[j] = true
		if !d.value(d.bs[j], 0) {
			return false
		}
		more, ok := d.sep('}')
		if !ok {
			return false
		}
		if !more {
			break
		}
	}
	for j := range d.bs {
		if !seen[j] {
			return false
		}
	}
	return true
}

// value reads a list or scalar at list depth depth of tb's tensor. As
// toTensor does, the first list met at each depth (the chain of first
// elements) sets that dimension, and every other list at that depth must
// have its length; the first scalar (or the first empty list) sets the rank.
func (d *fastDecoder) value(tb *builder, depth int) bool {
	c := d.next()
	if c != '[' {
		if tb.rank < 0 {
			tb.rank = depth
		} else if tb.rank != depth {
			return false
		}
		return d.scalar(tb)
	}
	if (tb.rank >= 0 && depth >= tb.rank) || depth >= maxListDepth {
		return false
	}
	first := len(tb.shape) == depth
	if first {
		tb.shape = append(tb.shape, -1)
	}
	d.i++
	n := 0
	if c := d.next(); c == ']' {
		d.i++
	} else if c != '[' && tb.dt == tensor.Float32 && (tb.rank < 0 || tb.rank == depth+1) {
		// A list of numbers: the hot loop.
		tb.rank = depth + 1
		limit := -1
		if !first {
			limit = tb.shape[depth]
		}
		var ok bool
		if n, ok = d.float32s(tb, limit); !ok {
			return false
		}
	} else {
		for {
			if !first && n == tb.shape[depth] {
				return false
			}
			if !d.value(tb, depth+1) {
				return false
			}
			n++
			more, ok := d.sep(']')
			if !ok {
				return false
			}
			if !more {
				break
			}
		}
	}
	if first {
		tb.shape[depth] = n
		if n == 0 {
			tb.rank = depth + 1
		}
		return true
	}
	return n == tb.shape[depth]
}

// scalar reads a number (or a boolean, for a bool input) into tb, converted
// exactly as setElem converts it.
func (d *fastDecoder) scalar(tb *builder) bool {
	if tb.dt == tensor.Bool {
		switch {
		case hasPrefix(d.b[d.i:], "true"):
			d.i += 4
			tb.bools = append(tb.bools, true)
		case hasPrefix(d.b[d.i:], "false"):
			d.i += 5
			tb.bools = append(tb.bools, false)
		default:
			return false
		}
		return true
	}
	start := d.i
	if !d.number() {
		return false
	}
	lit := d.b[start:d.i]
	switch tb.dt {
	case tensor.Float32:
		f, ok := parseFloat32(lit)
		if !ok {
			return false
		}
		tb.f32 = append(tb.f32, f)
	case tensor.Float64:
		f, err := strconv.ParseFloat(string(lit), 64)
		if err != nil {
			return false
		}
		tb.f64 = append(tb.f64, f)
	case tensor.Int32:
		v, err := strconv.ParseInt(string(lit), 10, 32)
		if err != nil {
			return false
		}
		tb.i32 = append(tb.i32, int32(v))
	case tensor.Int64:
		v, err := strconv.ParseInt(string(lit), 10, 64)
		if err != nil {
			return false
		}
		tb.i64 = append(tb.i64, v)
	case tensor.Uint8:
		v, err := strconv.ParseUint(string(lit), 10, 8)
		if err != nil {
			return false
		}
		tb.u8 = append(tb.u8, uint8(v))
	default:
		return false
	}
	return true
}

// float32s reads the numbers of a list, its '[' read, through its ']', into
// tb, and returns their count; limit (if not negative) is the most allowed.
func (d *fastDecoder) float32s(tb *builder, limit int) (int, bool) {
	for n := 0; n != limit; {
		d.ws()
		f, next, ok := scanFloat32(d.b, d.i)
		if !ok {
			return 0, false
		}
		d.i = next
		tb.f32 = append(tb.f32, f)
		n++
		switch d.next() {
		case ',':
			d.i++
		case ']':
			d.i++
			return n, true
		default:
			return 0, false
		}
	}
	return 0, false
}

func hasPrefix(b []byte, s string) bool { return len(b) >= len(s) && string(b[:len(s)]) == s }

// number reads a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *fastDecoder) number() bool {
	b, i := d.b, d.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return false
		}
		i = j
	}
	d.i = i
	return true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// float64pow10 holds the powers of ten that float64 represents exactly.
var float64pow10 = [...]float64{
	1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
}

// scanFloat32 reads the JSON number at b[i:] and converts it to the
// float32 that strconv.ParseFloat(literal, 32) returns; it returns the
// index after the literal, and ok false for a malformed literal or one out
// of float32's range (where ParseFloat fails). Literals whose decimal
// mantissa has at most 15 significant digits and whose decimal exponent is
// at most 22 in size take an exact path: the mantissa and the power of ten
// are exact float64s, so their product or quotient is the correctly
// rounded float64 r of the literal, and float32(r) is the correctly rounded
// float32 unless r lies exactly halfway between two float32s (the double
// rounding case) or outside float32's normal range; those, and all other
// literals, go to strconv.
func scanFloat32(b []byte, i int) (f float32, next int, ok bool) {
	start := i
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	var mant uint64
	nd, exp := 0, 0 // significant digits (mant is exact while nd <= 19); decimal exponent
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			mant = mant*10 + uint64(b[i]-'0')
			nd++
		}
	default:
		return 0, i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		from := i
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if nd > 0 || b[i] != '0' {
				mant = mant*10 + uint64(b[i]-'0')
				nd++
			}
			exp--
		}
		if i == from {
			return 0, i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		from, e := i, 0
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			if e < 10000 {
				e = e*10 + int(b[i]-'0')
			}
		}
		if i == from {
			return 0, i, false
		}
		if eneg {
			e = -e
		}
		exp += e
	}
	if mant == 0 && nd == 0 {
		if neg {
			return float32(math.Copysign(0, -1)), i, true
		}
		return 0, i, true
	}
	if nd > 15 || exp < -22 || exp > 22 {
		f, ok := slowFloat32(b[start:i])
		return f, i, ok
	}
	r := float64(mant)
	if exp < 0 {
		r /= float64pow10[-exp]
	} else {
		r *= float64pow10[exp]
	}
	// Outside float32's normal range, or exactly halfway between two
	// float32s (the 29 low mantissa bits are 1 followed by zeros).
	if r < 0x1p-126 || r > math.MaxFloat32 || math.Float64bits(r)&(1<<29-1) == 1<<28 {
		f, ok := slowFloat32(b[start:i])
		return f, i, ok
	}
	f = float32(r)
	if neg {
		f = -f
	}
	return f, i, true
}

// parseFloat32 converts a whole JSON number literal as scanFloat32 does.
func parseFloat32(lit []byte) (float32, bool) {
	f, next, ok := scanFloat32(lit, 0)
	return f, ok && next == len(lit)
}

func slowFloat32(lit []byte) (float32, bool) {
	f, err := strconv.ParseFloat(string(lit), 32)
	return float32(f), err == nil
}

// builder accumulates one input's elements and shape.
type builder struct {
	dt    tensor.DType
	shape []int // shape[k] is -1 while the first list at depth k is open
	rank  int   // -1 until the first scalar or empty list
	f32   []float32
	f64   []float64
	i32   []int32
	i64   []int64
	u8    []uint8
	bools []bool
}

func (tb *builder) reset(dt tensor.DType) {
	tb.dt, tb.shape, tb.rank = dt, tb.shape[:0], -1
	tb.f32, tb.f64, tb.i32, tb.i64, tb.u8, tb.bools = tb.f32[:0], tb.f64[:0], tb.i32[:0], tb.i64[:0], tb.u8[:0], tb.bools[:0]
}

func (tb *builder) cap() int {
	return max(cap(tb.f32), cap(tb.f64), cap(tb.i32), cap(tb.i64), cap(tb.u8), cap(tb.bools))
}

// tensor copies the elements into a new tensor of the decoded shape.
func (tb *builder) tensor() (*tensor.Tensor, bool) {
	if tb.rank < 0 || tb.rank > len(tb.shape) {
		return nil, false
	}
	shape := tb.shape[:tb.rank]
	if slices.Contains(shape, -1) {
		return nil, false
	}
	// Every dimension counts lists or elements read, so n cannot overflow.
	n := tensor.NumElements(shape)
	var got int
	switch tb.dt {
	case tensor.Float32:
		got = len(tb.f32)
	case tensor.Float64:
		got = len(tb.f64)
	case tensor.Int32:
		got = len(tb.i32)
	case tensor.Int64:
		got = len(tb.i64)
	case tensor.Uint8:
		got = len(tb.u8)
	case tensor.Bool:
		got = len(tb.bools)
	}
	if got != n {
		return nil, false
	}
	t := tensor.New(tb.dt, shape...)
	switch tb.dt {
	case tensor.Float32:
		copy(t.Float32s(), tb.f32)
	case tensor.Float64:
		copy(t.Float64s(), tb.f64)
	case tensor.Int32:
		copy(t.Int32s(), tb.i32)
	case tensor.Int64:
		copy(t.Int64s(), tb.i64)
	case tensor.Uint8:
		copy(t.Uint8s(), tb.u8)
	case tensor.Bool:
		copy(t.Bools(), tb.bools)
	}
	return t, true
}
