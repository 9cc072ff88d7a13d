package serving

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/tensor"
)

// The request decoder reads a predict request's JSON straight into tensors:
// it never builds generic JSON values, and what it allocates is bounded by
// the body whatever the JSON (escapes, deep nesting, huge numbers, many
// small lists). A body is read in one pass into pooled scratch when it is
// small (onePassMax), and in two passes otherwise: the first checks the
// syntax and the structure and counts each input's elements, the second
// converts them into tensors allocated at their exact size. A large body
// therefore costs its tensors and a few small buffers: at most 4 bytes per
// byte of body for 8-byte dtypes (an element takes at least two bytes,
// "0,"), 2 for float32.
//
// It accepts what encoding/json accepts, plus TF Serving's bare NaN,
// Infinity and -Infinity where a value starts, and gives the same request
// as decoding the body into generic values would. Errors are those of
// TF Serving's REST API, checked in this order: JSON syntax anywhere in the
// body (encoding/json's wording, with the offset), then the top-level keys,
// then the structure of the instances (objects, input names), then the
// values: the first error met in the body.

const (
	// maxListDepth is the deepest nesting of lists in one input's value.
	maxListDepth = 32
	// maxNesting is the deepest nesting of containers in a body, as
	// encoding/json's.
	maxNesting = 10000
	// onePassMax is the largest body decoded in one pass into pooled
	// scratch; larger ones take two passes and allocate only their tensors.
	onePassMax = 64 << 10
	// maxPooledElems and maxPooledBytes bound the scratch a pooled decoder
	// keeps.
	maxPooledElems = onePassMax
	maxPooledBytes = 64 << 10
	// maxQuoted is the most bytes of a key or literal quoted in an error.
	maxQuoted = 64
	// maxNulString is the longest string holding a NUL and a number that
	// is read as the number.
	maxNulString = 1 << 10
)

// decodeMode is what a pass of the decoder does with elements.
type decodeMode uint8

const (
	onePass   decodeMode = iota // check and convert into the builders' scratch
	countPass                   // check and count; convert nothing
	fillPass                    // convert into tensors of the counted shapes
)

// errCareful stops a pass that met an object repeating one of its keys:
// the last occurrence wins, so the pass restarts with each such object's
// keys located before its values are read.
var errCareful = errors.New("serving: repeated key")

var decoderPool = sync.Pool{New: func() any { return new(decoder) }}

// decodeRequest parses a predict request body against sig, as TensorFlow
// Serving's REST API defines it: {"signature_name": ..., "instances": [...]}
// or {"signature_name": ..., "inputs": ...}. Every error wraps
// errBadRequest and names the input involved. The returned request does not
// alias body.
func decodeRequest(body []byte, sig savedmodel.Signature) (*request, error) {
	return decodeNamed(body, sig, sig.InputNames())
}

// decodeNamed is decodeRequest with sig's input names, sorted, given.
func decodeNamed(body []byte, sig savedmodel.Signature, names []string) (*request, error) {
	return decodeWith(body, sig, names, len(body) <= onePassMax)
}

// decodeWith decodes in one pass or in two.
func decodeWith(body []byte, sig savedmodel.Signature, names []string, one bool) (*request, error) {
	d := decoderPool.Get().(*decoder)
	defer d.release()
	d.b, d.names = body, names
	d.bs = d.bs[:0]
	for k, name := range names {
		if k == len(d.pool) {
			d.pool = append(d.pool, new(builder))
		}
		tb := d.pool[k]
		tb.name, tb.dt = name, sig.Inputs[name].DType
		d.bs = append(d.bs, tb)
	}
	if cap(d.seen) < len(names) {
		d.seen, d.offs = make([]bool, len(names)), make([]int, len(names))
	}
	d.seen, d.offs = d.seen[:len(names)], d.offs[:len(names)]
	d.keyLimit = maxQuoted
	for _, name := range names {
		d.keyLimit = max(d.keyLimit, len(name)+1)
	}
	d.careful = false
	for {
		mode := countPass
		if one {
			mode = onePass
		}
		req, err := d.request(mode)
		if err == errCareful && !d.careful {
			d.careful = true
			continue
		}
		return req, err
	}
}

// decoder is a cursor over a body and a builder per input.
type decoder struct {
	b        []byte
	i        int
	mode     decodeMode
	careful  bool // objects in the instances or inputs may repeat keys
	names    []string
	bs       []*builder // by input index, as names
	pool     []*builder // builders kept for reuse
	seen     []bool     // inputs met in the current object
	offs     []int      // where each input's value starts in the current object
	path     [maxListDepth + 1]int
	str      []byte   // scratch: a decoded string
	keyLimit int      // the most bytes of a key worth keeping: a longer one names no input
	kinds    []uint64 // skip's open containers, a bit per depth: 1 for an object
	err      error
	syntax   bool // err is a syntax error
}

func (d *decoder) release() {
	for _, tb := range d.bs {
		tb.unfill()
	}
	for _, tb := range d.pool {
		if tb.cap() > maxPooledElems {
			return // drop the whole decoder
		}
	}
	if cap(d.str) > maxPooledBytes {
		return
	}
	d.b, d.names, d.bs, d.err = nil, nil, d.bs[:0], nil
	decoderPool.Put(d)
}

// builder accumulates one input's shape and elements.
type builder struct {
	name   string
	dt     tensor.DType
	shape  []int // shape[k] is -1 while the first list at depth k is open
	rank   int   // -1 until the first scalar or empty list
	n      int   // elements counted (countPass)
	failed bool  // a value of the input is in error: its later values are skipped
	elems        // the elements: pooled scratch, or a tensor's storage (fillPass)
	kept   elems // the scratch while elems is a tensor's storage
	filled bool
}

type elems struct {
	f32   []float32
	f64   []float64
	i32   []int32
	i64   []int64
	u8    []uint8
	bools []bool
}

func (tb *builder) reset() {
	tb.unfill()
	tb.shape, tb.rank, tb.n, tb.failed = tb.shape[:0], -1, 0, false
	e := &tb.elems
	e.f32, e.f64, e.i32, e.i64, e.u8, e.bools = e.f32[:0], e.f64[:0], e.i32[:0], e.i64[:0], e.u8[:0], e.bools[:0]
}

func (tb *builder) cap() int {
	return max(cap(tb.f32), cap(tb.f64), cap(tb.i32), cap(tb.i64), cap(tb.u8), cap(tb.bools))
}

// count is the number of elements read.
func (tb *builder) count(mode decodeMode) int {
	if mode == countPass {
		return tb.n
	}
	switch tb.dt {
	case tensor.Float32:
		return len(tb.f32)
	case tensor.Float64:
		return len(tb.f64)
	case tensor.Int32:
		return len(tb.i32)
	case tensor.Int64:
		return len(tb.i64)
	case tensor.Uint8:
		return len(tb.u8)
	case tensor.Bool:
		return len(tb.bools)
	}
	return 0
}

// fill makes t's storage where the elements go.
func (tb *builder) fill(t *tensor.Tensor) {
	tb.kept, tb.filled = tb.elems, true
	tb.elems = elems{f32: t.Float32s()[:0], f64: t.Float64s()[:0], i32: t.Int32s()[:0], i64: t.Int64s()[:0], u8: t.Uint8s()[:0], bools: t.Bools()[:0]}
}

// unfill gives the builder its scratch back.
func (tb *builder) unfill() {
	if tb.filled {
		tb.elems, tb.kept, tb.filled = tb.kept, elems{}, false
	}
}

// shapeOf returns the decoded shape, or false if it is incomplete.
func (tb *builder) shapeOf() ([]int, bool) {
	if tb.rank < 0 || tb.rank > len(tb.shape) {
		return nil, false
	}
	shape := tb.shape[:tb.rank]
	for _, n := range shape {
		if n < 0 {
			return nil, false
		}
	}
	return shape, true
}

// request runs one pass (two for countPass) over the body.
func (d *decoder) request(mode decodeMode) (*request, error) {
	d.mode, d.i, d.err, d.syntax = mode, 0, nil, false
	for _, tb := range d.bs {
		tb.reset()
	}
	if c := d.next(); c != '{' {
		// Not an object: the syntax of the whole body comes first.
		if !d.skip(0) || !d.end() {
			return nil, d.err
		}
		return nil, badRequest("JSON Parse error: the request body must be a JSON object, not %s", kindOf(c))
	}
	d.i++
	var (
		sigErr           error
		sawInst, sawCols bool
		valErr           error // the error of the last "instances" or "inputs"
		valStart         int
		req              request
	)
	if d.next() == '}' {
		d.i++
	} else {
		for {
			k, _, ok := d.key(16)
			if !ok {
				return nil, d.err
			}
			switch string(k) {
			case "signature_name":
				if sigErr, ok = d.signature(); !ok {
					return nil, d.err
				}
			case "instances", "inputs":
				rows := string(k) == "instances"
				sawInst, sawCols = sawInst || rows, sawCols || !rows
				d.ws()
				start := d.i
				for _, tb := range d.bs {
					tb.reset()
				}
				d.err = nil
				n, ok := d.value0(rows)
				if !ok {
					if d.syntax || d.err == errCareful {
						return nil, d.err
					}
					valErr, d.err = d.err, nil
					d.i = start
					if !d.skip(1) {
						return nil, d.err
					}
				} else {
					valErr = nil
				}
				valStart, req.rows, req.n = start, rows, n
			default:
				if !d.skip(1) {
					return nil, d.err
				}
			}
			switch d.next() {
			case ',':
				d.i++
				continue
			case '}':
				d.i++
			default:
				d.synErr("after object key:value pair")
				return nil, d.err
			}
			break
		}
	}
	if !d.end() {
		return nil, d.err
	}
	switch {
	case sigErr != nil:
		return nil, sigErr
	case sawInst && sawCols:
		return nil, badRequest("Request body may have only one of 'instances' (row format) or 'inputs' (columnar format), not both")
	case !sawInst && !sawCols:
		return nil, badRequest("Missing 'instances' or 'inputs' key")
	case valErr != nil:
		return nil, valErr
	}
	req.inputs = make(map[string]*tensor.Tensor, len(d.bs))
	if mode == countPass {
		for _, tb := range d.bs {
			shape, ok := tb.shapeOf()
			if !ok || tensor.NumElements(shape) != tb.n {
				return nil, badRequest("input %q: %d elements for shape %v", tb.name, tb.n, shape)
			}
			t := tensor.New(tb.dt, shape...)
			tb.fill(t)
			req.inputs[tb.name] = t
		}
		d.mode, d.i = fillPass, valStart
		if _, ok := d.value0(req.rows); !ok {
			return nil, d.err
		}
		for _, tb := range d.bs {
			if n := tb.count(fillPass); n != req.inputs[tb.name].NumElements() {
				return nil, badRequest("input %q: %d elements for shape %v", tb.name, n, req.inputs[tb.name].Shape())
			}
			tb.unfill()
		}
		return &req, nil
	}
	for _, tb := range d.bs {
		t, err := tb.tensor()
		if err != nil {
			return nil, err
		}
		req.inputs[tb.name] = t
	}
	return &req, nil
}

// tensor copies the scratch into a new tensor of the decoded shape.
func (tb *builder) tensor() (*tensor.Tensor, error) {
	shape, ok := tb.shapeOf()
	n := tb.count(onePass)
	if !ok || tensor.NumElements(shape) != n {
		return nil, badRequest("input %q: %d elements for shape %v", tb.name, n, shape)
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
	return t, nil
}

// value0 reads the value of "instances" (rows) or "inputs".
func (d *decoder) value0(rows bool) (int, bool) {
	if rows {
		return d.instances()
	}
	return 0, d.columns()
}

// signature reads the value of "signature_name": its error, if any, is
// returned; ok is false for a syntax error.
func (d *decoder) signature() (err error, ok bool) {
	switch c := d.next(); {
	case c == '"':
		s, long, ok := d.string(len(defaultSignature) + 1)
		if !ok {
			return nil, false
		}
		if name := string(s); long || (name != defaultSignature && name != "") {
			return badRequest("Serving signature name: %s not found in signature def (the model has only %q)", quote(s, long), defaultSignature), true
		}
		return nil, true
	case c == 'n' && hasPrefix(d.b[d.i:], "null"):
		d.i += 4 // as encoding/json: null leaves the name empty
		return nil, true
	default:
		if tok := nonFinite(d.b, d.i); tok != "" {
			d.i += len(tok)
			return badRequest("Serving signature name: %q not found in signature def (the model has only %q)", tok, defaultSignature), true
		}
		if !d.skip(1) {
			return nil, false
		}
		return badRequest("'signature_name' must be a string"), true
	}
}

// instances reads the row format's list: bare values of the one input, or
// objects holding every input. It returns the number of instances.
func (d *decoder) instances() (int, bool) {
	if d.next() != '[' {
		return 0, d.fail(badRequest("'instances' must be a JSON list"))
	}
	open := d.i
	d.i++
	switch d.next() {
	case ']':
		return 0, d.fail(badRequest("'instances' is an empty list"))
	case '{':
	default:
		// Bare values: the list itself is the input's tensor.
		if len(d.bs) != 1 {
			return 0, d.fail(badRequest("the model has %d inputs (%s): each instance must be a JSON object keyed by input name", len(d.names), strings.Join(d.names, ", ")))
		}
		d.i = open
		tb := d.bs[0]
		if !d.value(tb, 0, 1) {
			return 0, false
		}
		return tb.shape[0], true
	}
	if d.mode != fillPass {
		for _, tb := range d.bs {
			tb.shape = append(tb.shape, -1) // the instances' dimension
		}
	}
	var inputErr error // the first error in a value
	n := 0
	for {
		if d.next() != '{' {
			return 0, d.fail(badRequest("instance %d is not a JSON object, as instance 0 is: instances must all have named inputs or all be bare values", n))
		}
		d.path[0] = n
		if !d.instance(n, &inputErr) {
			return 0, false
		}
		n++
		switch d.next() {
		case ',':
			d.i++
			continue
		case ']':
			d.i++
		default:
			return 0, d.synErr("after array element")
		}
		break
	}
	if inputErr != nil {
		return 0, d.fail(inputErr)
	}
	if d.mode != fillPass {
		for _, tb := range d.bs {
			tb.shape[0] = n
		}
	}
	return n, true
}

// instance reads instance n, an object holding every input once (its '{'
// is next). An error in a value is kept in *inputErr if it is the first,
// and the input's later values are skipped: errors in the instances'
// structure come first.
func (d *decoder) instance(n int, inputErr *error) bool {
	d.i++
	clear(d.seen)
	if d.careful {
		// Locate each input's last occurrence, then read them.
		if !d.locate(3, func(k []byte, long bool) error {
			return badRequest("instance %d: unknown input %s (the model's inputs are %s)", n, quote(k, long), strings.Join(d.names, ", "))
		}) {
			return false
		}
		end := d.i
		if err := d.missing(n); err != nil {
			return d.fail(err)
		}
		for j, tb := range d.bs {
			d.i = d.offs[j]
			if !d.instanceValue(tb, inputErr) {
				return false
			}
		}
		d.i = end
		return true
	}
	if d.next() != '}' {
		for {
			k, long, ok := d.key(d.keyLimit)
			if !ok {
				return false
			}
			j := d.input(k, long)
			if j < 0 {
				return d.fail(badRequest("instance %d: unknown input %s (the model's inputs are %s)", n, quote(k, long), strings.Join(d.names, ", ")))
			}
			if d.seen[j] {
				return d.fail(errCareful)
			}
			d.seen[j] = true
			if !d.instanceValue(d.bs[j], inputErr) {
				return false
			}
			more, ok := d.sep('}', "after object key:value pair")
			if !ok {
				return false
			}
			if !more {
				break
			}
		}
	} else {
		d.i++
	}
	if err := d.missing(n); err != nil {
		return d.fail(err)
	}
	return true
}

// instanceValue reads one instance's value of tb's input (or skips it, if
// the input is in error); false only for a syntax error.
func (d *decoder) instanceValue(tb *builder, inputErr *error) bool {
	d.ws()
	start := d.i
	if !tb.failed {
		if d.value(tb, 1, 2) {
			return true
		}
		if d.syntax || d.mode == fillPass {
			return false
		}
		tb.failed = true
		if *inputErr == nil {
			*inputErr = d.err
		}
		d.err = nil
		d.i = start
	}
	return d.skip(3)
}

// missing returns the error for the first input not seen in instance n (-1:
// in the columnar format).
func (d *decoder) missing(n int) error {
	for j, ok := range d.seen {
		if !ok {
			if n < 0 {
				return badRequest("missing input %q", d.names[j])
			}
			return badRequest("instance %d: missing input %q", n, d.names[j])
		}
	}
	return nil
}

// locate reads an object's keys, its '{' read, and skips their values,
// noting in offs where the last occurrence of each input's value starts;
// depth containers are open inside the object. unknown words the error
// for a key that names no input.
func (d *decoder) locate(depth int, unknown func(k []byte, long bool) error) bool {
	if d.next() == '}' {
		d.i++
		return true
	}
	for {
		k, long, ok := d.key(d.keyLimit)
		if !ok {
			return false
		}
		j := d.input(k, long)
		if j < 0 {
			return d.fail(unknown(k, long))
		}
		d.seen[j] = true
		d.ws()
		d.offs[j] = d.i
		if !d.skip(depth) {
			return false
		}
		more, ok := d.sep('}', "after object key:value pair")
		if !ok {
			return false
		}
		if !more {
			return true
		}
	}
}

// columns reads the columnar format's value: the bare tensor of the one
// input, or an object holding every input.
func (d *decoder) columns() bool {
	if d.next() != '{' {
		if len(d.bs) != 1 {
			return d.fail(badRequest("the model has %d inputs (%s): 'inputs' must be a JSON object keyed by input name", len(d.names), strings.Join(d.names, ", ")))
		}
		return d.value(d.bs[0], 0, 1)
	}
	d.i++
	clear(d.seen)
	var valErr error
	if d.careful {
		if !d.locate(2, func(k []byte, long bool) error {
			return badRequest("unknown input %s (the model's inputs are %s)", quote(k, long), strings.Join(d.names, ", "))
		}) {
			return false
		}
		end := d.i
		for j, tb := range d.bs {
			if d.seen[j] {
				d.i = d.offs[j]
				if !d.value(tb, 0, 2) {
					return false
				}
			}
		}
		d.i = end
		if err := d.missing(-1); err != nil {
			return d.fail(err)
		}
		return true
	}
	if d.next() == '}' {
		d.i++
	} else {
		for {
			k, long, ok := d.key(d.keyLimit)
			if !ok {
				return false
			}
			j := d.input(k, long)
			if j < 0 {
				return d.fail(badRequest("unknown input %s (the model's inputs are %s)", quote(k, long), strings.Join(d.names, ", ")))
			}
			if d.seen[j] {
				return d.fail(errCareful)
			}
			d.seen[j] = true
			// An error in a value counts unless a later key repeats its
			// input's: read on.
			d.ws()
			start := d.i
			if !d.value(d.bs[j], 0, 2) {
				if d.syntax || d.mode == fillPass {
					return false
				}
				valErr = cmp.Or(valErr, d.err)
				d.err, d.i = nil, start
				if !d.skip(2) {
					return false
				}
			}
			more, ok := d.sep('}', "after object key:value pair")
			if !ok {
				return false
			}
			if !more {
				break
			}
		}
	}
	if valErr != nil {
		return d.fail(valErr)
	}
	if err := d.missing(-1); err != nil {
		return d.fail(err)
	}
	return true
}

// input returns the index of the input named k (-1: none).
func (d *decoder) input(k []byte, long bool) int {
	if long {
		return -1
	}
	if len(d.names) <= 8 {
		for j, name := range d.names {
			if name == string(k) {
				return j
			}
		}
		return -1
	}
	lo, hi := 0, len(d.names)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if d.names[m] < string(k) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(d.names) && d.names[lo] == string(k) {
		return lo
	}
	return -1
}

// value reads a list or scalar at list depth depth of tb's tensor; nest
// containers are open around the value at depth 0. As the tensor's shape is
// that of the chain of first elements, the first list met at each depth
// sets that dimension and every other list at that depth must have its
// length; the first scalar (or the first empty list) sets the rank.
func (d *decoder) value(tb *builder, depth, nest int) bool {
	c := d.next()
	if c != '[' {
		if tb.rank < 0 {
			tb.rank = depth
		}
		if depth < tb.rank {
			return d.ragged(tb, depth, "a scalar")
		}
		return d.scalar(tb, depth)
	}
	if tb.rank >= 0 && depth >= tb.rank {
		return d.fail(badRequest("input %q: ragged value: the element at %v is a list, want a scalar of type %v", tb.name, d.path[:depth], tb.dt))
	}
	if depth >= maxListDepth {
		return d.fail(badRequest("input %q: more than %d nested lists", tb.name, maxListDepth))
	}
	first := len(tb.shape) == depth
	want := -1
	if first {
		tb.shape = append(tb.shape, -1)
	} else {
		want = tb.shape[depth]
	}
	d.i++
	n := 0
	if d.next() == ']' {
		d.i++
	} else {
		// The elements: runs of numbers in the hot loop, anything else
		// one by one.
		hot := d.mode == countPass && numeric(tb.dt) || d.mode != countPass && tb.dt == tensor.Float32
	elements:
		for {
			if n == want {
				return d.excess(tb, depth, n, nest)
			}
			if hot && (tb.rank < 0 || tb.rank == depth+1) {
				m, st := d.numbers(tb, n, want)
				if m > n {
					tb.rank = depth + 1
				}
				n = m
				switch st {
				case listEnd:
					break elements
				case listFull:
					continue
				case listError:
					return false
				}
			}
			d.path[depth] = n
			if !d.value(tb, depth+1, nest) {
				return false
			}
			n++
			more, ok := d.sep(']', "after array element")
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
	if n != want {
		return d.ragged(tb, depth, fmt.Sprintf("a list of %d", n))
	}
	return true
}

// Why numbers stopped.
const (
	listEnd   = iota // the list's ']' is read
	listFull         // the list has its length, and a ',' is read
	listOther        // the next element is not a plain number: the cursor is on it
	listError        // a syntax error
)

// numbers reads the elements of a list while they are plain numbers (of a
// float32 input, or of any numeric input in the counting pass), the n
// before them read, at most want in all (if not negative).
func (d *decoder) numbers(tb *builder, n, want int) (int, int) {
	b := d.b
	for {
		d.ws()
		if d.mode == countPass {
			end, ctx := scanNumber(b, d.i)
			if ctx != "" {
				return n, listOther
			}
			d.i = end
			tb.n++
		} else {
			f, next, ok := scanFloat32(b, d.i)
			if !ok {
				return n, listOther
			}
			d.i = next
			tb.f32 = append(tb.f32, f)
		}
		n++
		c := d.next()
		if c == ',' {
			d.i++
			if n == want {
				return n, listFull
			}
			continue
		}
		if c == ']' {
			d.i++
			return n, listEnd
		}
		d.synErr("after array element")
		return n, listError
	}
}

// excess counts the rest of a list at depth that has more than its n
// elements, for the error.
func (d *decoder) excess(tb *builder, depth, n, nest int) bool {
	want := n
	for {
		if !d.skip(nest + depth + 1) {
			return false
		}
		n++
		more, ok := d.sep(']', "after array element")
		if !ok {
			return false
		}
		if !more {
			break
		}
	}
	d.err = nil
	return d.fail(badRequest("input %q: ragged value: the element at %v is a list of %d, want a list of %d (all lists at one depth must have the same length)", tb.name, d.path[:depth], n, want))
}

func (d *decoder) ragged(tb *builder, depth int, got string) bool {
	return d.fail(badRequest("input %q: ragged value: the element at %v is %s, want a list of %d (all lists at one depth must have the same length)", tb.name, d.path[:depth], got, tb.shape[depth]))
}

// scalar reads the element at the rank's depth.
func (d *decoder) scalar(tb *builder, depth int) bool {
	if d.i >= len(d.b) {
		return d.synErr("")
	}
	switch c := d.b[d.i]; c {
	case '"':
		if !hasPrefix(d.b[d.i+1:], `\u0000`) {
			return d.kindErr(tb, depth, "a string")
		}
		// A NUL, then a number: what a bare NaN became in encoding/json's
		// generic decoding. Kept as the number it spells.
		if tb.dt == tensor.Bool {
			return d.kindErr(tb, depth, "a number")
		}
		if d.mode == countPass {
			if !d.skipString() {
				return false
			}
			return d.counted(tb, depth)
		}
		s, long, ok := d.string(maxNulString)
		if !ok {
			return false
		}
		if long {
			return d.elemErr(tb, depth, fmt.Sprintf("%s... is not a number", literal(string(s[1:maxQuoted]))))
		}
		return d.convert(tb, depth, string(s[1:]))
	case 't', 'f':
		if tb.dt != tensor.Bool {
			return d.kindErr(tb, depth, "a boolean")
		}
		word := "true"
		if c == 'f' {
			word = "false"
		}
		if !d.literal(word) {
			return false
		}
		if d.mode == countPass {
			tb.n++
		} else {
			tb.bools = append(tb.bools, c == 't')
		}
		return true
	case 'n':
		return d.kindErr(tb, depth, "null")
	case '{':
		return d.kindErr(tb, depth, "an object")
	}
	start := d.i
	tok := nonFinite(d.b, d.i)
	if tok != "" {
		d.i += len(tok)
	} else if !d.number() {
		return false
	}
	if tb.dt == tensor.Bool {
		return d.kindErr(tb, depth, "a number")
	}
	if d.mode == countPass {
		return d.counted(tb, depth)
	}
	if tok != "" {
		return d.convert(tb, depth, tok)
	}
	lit := d.b[start:d.i]
	if tb.dt == tensor.Float32 {
		// A JSON number that strconv refuses is out of range.
		f, ok := parseFloat32(lit)
		if !ok {
			return d.elemErr(tb, depth, fmt.Sprintf("%s is out of the range of float32", literal(string(lit[:min(len(lit), maxQuoted+1)]))))
		}
		tb.f32 = append(tb.f32, f)
		return true
	}
	return d.convert(tb, depth, string(lit))
}

// counted counts a number in the first of two passes.
func (d *decoder) counted(tb *builder, depth int) bool {
	switch tb.dt {
	case tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64, tensor.Uint8:
		tb.n++
		return true
	}
	return d.elemErr(tb, depth, fmt.Sprintf("dtype %v is not supported over JSON", tb.dt))
}

// convert converts s (a JSON number, a non-finite token, or what follows
// the NUL of a string) as strconv does.
func (d *decoder) convert(tb *builder, depth int, s string) bool {
	var err error
	switch tb.dt {
	case tensor.Float32:
		var f float64
		if f, err = strconv.ParseFloat(s, 32); err == nil {
			tb.f32 = append(tb.f32, float32(f))
			return true
		}
		return d.elemErr(tb, depth, fmt.Sprintf("%s is out of the range of float32", literal(s)))
	case tensor.Float64:
		var f float64
		if f, err = strconv.ParseFloat(s, 64); err == nil {
			tb.f64 = append(tb.f64, f)
			return true
		}
		return d.elemErr(tb, depth, fmt.Sprintf("%s is out of the range of float64", literal(s)))
	case tensor.Int32:
		var v int64
		if v, err = strconv.ParseInt(s, 10, 32); err == nil {
			tb.i32 = append(tb.i32, int32(v))
			return true
		}
	case tensor.Int64:
		var v int64
		if v, err = strconv.ParseInt(s, 10, 64); err == nil {
			tb.i64 = append(tb.i64, v)
			return true
		}
	case tensor.Uint8:
		var v uint64
		if v, err = strconv.ParseUint(s, 10, 8); err == nil {
			tb.u8 = append(tb.u8, uint8(v))
			return true
		}
		return d.elemErr(tb, depth, fmt.Sprintf("%s is not a uint8", literal(s)))
	default:
		return d.elemErr(tb, depth, fmt.Sprintf("dtype %v is not supported over JSON", tb.dt))
	}
	return d.elemErr(tb, depth, fmt.Sprintf("%s is not an %v", literal(s), tb.dt))
}

func (d *decoder) kindErr(tb *builder, depth int, kind string) bool {
	want := "number"
	if tb.dt == tensor.Bool {
		want = "boolean"
	}
	return d.elemErr(tb, depth, fmt.Sprintf("%s is not a %s (the input is %v)", kind, want, tb.dt))
}

func (d *decoder) elemErr(tb *builder, depth int, msg string) bool {
	return d.fail(badRequest("input %q: element %v: %s", tb.name, d.path[:depth], msg))
}

// fail records a semantic error and returns false.
func (d *decoder) fail(err error) bool {
	d.err, d.syntax = err, false
	return false
}

// synErr records a syntax error at the cursor, in encoding/json's words,
// and returns false.
func (d *decoder) synErr(context string) bool {
	if d.i >= len(d.b) {
		d.err = badRequest("JSON Parse error: unexpected end of JSON input")
	} else {
		d.err = badRequest("JSON Parse error: invalid character %s %s at offset %d", quoteChar(d.b[d.i]), context, d.i)
	}
	d.syntax = true
	return false
}

func quoteChar(c byte) string {
	switch c {
	case '\'':
		return `'\''`
	case '"':
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	return "'" + s[1:len(s)-1] + "'"
}

// quote quotes a key or string for an error, cut at maxQuoted bytes.
func quote(s []byte, long bool) string {
	if len(s) > maxQuoted {
		s, long = s[:maxQuoted], true
	}
	q := strconv.Quote(string(s))
	if long {
		q += "..."
	}
	return q
}

// literal is a number literal for an error, cut at maxQuoted bytes.
func literal(s string) string {
	if len(s) > maxQuoted {
		return s[:maxQuoted] + "..."
	}
	return s
}

func kindOf(c byte) string {
	switch c {
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func (d *decoder) ws() {
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
func (d *decoder) next() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// end checks that only white space follows the top-level value.
func (d *decoder) end() bool {
	if d.ws(); d.i != len(d.b) {
		return d.synErr("after top-level value")
	}
	return true
}

// sep reads the ',' or the closing byte after a member of a list or object.
func (d *decoder) sep(closing byte, context string) (more, ok bool) {
	switch d.next() {
	case ',':
		d.i++
		return true, true
	case closing:
		d.i++
		return false, true
	}
	return false, d.synErr(context)
}

// key reads an object key and the colon after it. The key is decoded as
// encoding/json decodes strings; limit, if not negative, is the most bytes
// kept (long is true if there were more). The key may alias the body or
// the decoder's scratch, until the next string.
func (d *decoder) key(limit int) (k []byte, long, ok bool) {
	if d.next() != '"' {
		return nil, false, d.synErr("looking for beginning of object key string")
	}
	if k, long, ok = d.string(limit); !ok {
		return nil, false, false
	}
	if d.next() != ':' {
		return nil, false, d.synErr("after object key")
	}
	d.i++
	return k, long, true
}

// string reads a string (its '"' is next) and decodes it as encoding/json
// does: escapes, and U+FFFD for invalid UTF-8 and lone surrogates. limit,
// if not negative, is the most bytes kept (long is true if there were more).
func (d *decoder) string(limit int) (s []byte, long, ok bool) {
	b := d.b
	start := d.i + 1
	i := start
	for i < len(b) {
		c := b[i]
		if c == '"' {
			d.i = i + 1
			s = b[start:i]
			if limit >= 0 && len(s) > limit {
				return s[:limit], true, true
			}
			return s, false, true
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			break
		}
		i++
	}
	out := d.str[:0]
	defer func() { d.str = out[:0] }()
	add := func(p ...byte) {
		if limit < 0 || len(out)+len(p) <= limit {
			out = append(out, p...)
		} else {
			long = true
		}
	}
	add(b[start:i]...)
	var rb [4]byte
	for {
		if i >= len(b) {
			d.i = i
			return nil, false, d.synErr("")
		}
		c := b[i]
		switch {
		case c == '"':
			d.i = i + 1
			return out, long, true
		case c == '\\':
			i++
			if i >= len(b) {
				d.i = i
				return nil, false, d.synErr("")
			}
			switch e := b[i]; e {
			case '"', '\\', '/':
				add(e)
				i++
			case 'b':
				add('\b')
				i++
			case 'f':
				add('\f')
				i++
			case 'n':
				add('\n')
				i++
			case 'r':
				add('\r')
				i++
			case 't':
				add('\t')
				i++
			case 'u':
				r, bad := hex4(b, i+1)
				if bad >= 0 {
					d.i = bad
					return nil, false, d.synErr(`in \u hexadecimal character escape`)
				}
				i += 5
				if utf16.IsSurrogate(r) {
					// As encoding/json: a valid pair is one rune, a lone
					// surrogate U+FFFD.
					r2 := rune(-1)
					if i+1 < len(b) && b[i] == '\\' && b[i+1] == 'u' {
						if v, bad := hex4(b, i+2); bad < 0 {
							r2 = v
						}
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				add(utf8.AppendRune(rb[:0], r)...)
			default:
				d.i = i
				return nil, false, d.synErr("in string escape code")
			}
		case c < 0x20:
			d.i = i
			return nil, false, d.synErr("in string literal")
		case c < utf8.RuneSelf:
			add(c)
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			i += size
			add(utf8.AppendRune(rb[:0], r)...)
		}
	}
}

// hex4 reads the 4 hex digits at b[i:]; bad is the index of the first
// byte that is not one (or len(b)), -1 if none.
func hex4(b []byte, i int) (r rune, bad int) {
	for k := range 4 {
		if i+k >= len(b) {
			return 0, len(b)
		}
		c := b[i+k]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, i + k
		}
		r = r*16 + rune(c)
	}
	return r, -1
}

// skipString reads a string without decoding it (its '"' is next).
func (d *decoder) skipString() bool {
	b := d.b
	i := d.i + 1
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			d.i = i + 1
			return true
		case c == '\\':
			i++
			if i >= len(b) {
				d.i = i
				return d.synErr("")
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if _, bad := hex4(b, i+1); bad >= 0 {
					d.i = bad
					return d.synErr(`in \u hexadecimal character escape`)
				}
				i += 5
			default:
				d.i = i
				return d.synErr("in string escape code")
			}
		case c < 0x20:
			d.i = i
			return d.synErr("in string literal")
		default:
			i++
		}
	}
	d.i = i
	return d.synErr("")
}

// literal reads true, false or null.
func (d *decoder) literal(word string) bool {
	for k := range len(word) {
		if d.i+k >= len(d.b) || d.b[d.i+k] != word[k] {
			d.i += k
			if k == 0 {
				return d.synErr("looking for beginning of value")
			}
			return d.synErr(fmt.Sprintf("in literal %s (expecting %s)", word, quoteChar(word[k])))
		}
	}
	d.i += len(word)
	return true
}

// nonFinite returns the NaN, Infinity or -Infinity token at b[i:], or "".
// TensorFlow Serving reads and writes these (its REST API's "JSON
// conformance"), as this server does: a client can send back what it was
// answered. They are not tokens when another letter, digit or one of _ . +
// - follows.
func nonFinite(b []byte, i int) string {
	for _, tok := range [...]string{"NaN", "Infinity", "-Infinity"} {
		end := i + len(tok)
		if hasPrefix(b[i:], tok) && (end == len(b) || !isTokenByte(b[end])) {
			return tok
		}
	}
	return ""
}

func isTokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '+' || c == '-'
}

func hasPrefix(b []byte, s string) bool { return len(b) >= len(s) && string(b[:len(s)]) == s }

// number reads a JSON number.
func (d *decoder) number() bool {
	end, ctx := scanNumber(d.b, d.i)
	d.i = end
	if ctx != "" {
		return d.synErr(ctx)
	}
	return true
}

// scanNumber returns the end of the JSON number at b[i:],
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?; if there is none, end
// is where it breaks off and ctx says how, in encoding/json's words.
func scanNumber(b []byte, i int) (end int, ctx string) {
	if i < len(b) && b[i] == '-' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, "in numeric literal"
		}
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return i, "looking for beginning of value"
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return j, "after decimal point in numeric literal"
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
			return j, "in exponent of numeric literal"
		}
		i = j
	}
	return i, ""
}

func numeric(dt tensor.DType) bool {
	switch dt {
	case tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64, tensor.Uint8:
		return true
	}
	return false
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// skip reads one value, checking its syntax only; depth containers are
// open around it (encoding/json allows maxNesting in all).
func (d *decoder) skip(depth int) bool {
	base := depth
value:
	for {
		switch c := d.next(); c {
		case '{', '[':
			if depth >= maxNesting {
				return d.synErr("exceeded max depth")
			}
			d.setKind(depth, c == '{')
			depth++
			d.i++
			if c == '{' {
				if d.next() != '}' {
					if !d.skipKey() {
						return false
					}
					continue value
				}
			} else if d.next() != ']' {
				continue value
			}
			d.i++
			depth--
		case '"':
			if !d.skipString() {
				return false
			}
		case 't':
			if !d.literal("true") {
				return false
			}
		case 'f':
			if !d.literal("false") {
				return false
			}
		case 'n':
			if !d.literal("null") {
				return false
			}
		default:
			if tok := nonFinite(d.b, d.i); tok != "" {
				d.i += len(tok)
			} else if c == '-' || c >= '0' && c <= '9' {
				if !d.number() {
					return false
				}
			} else {
				return d.synErr("looking for beginning of value")
			}
		}
		// A value ended: separators and closing brackets up to the next.
		for depth > base {
			obj := d.kind(depth - 1)
			c := d.next()
			switch {
			case c == ',':
				d.i++
				if obj && !d.skipKey() {
					return false
				}
				continue value
			case obj && c == '}', !obj && c == ']':
				d.i++
				depth--
			case obj:
				return d.synErr("after object key:value pair")
			default:
				return d.synErr("after array element")
			}
		}
		return true
	}
}

// skipKey reads an object key and its colon without decoding the key.
func (d *decoder) skipKey() bool {
	if d.next() != '"' {
		return d.synErr("looking for beginning of object key string")
	}
	if !d.skipString() {
		return false
	}
	if d.next() != ':' {
		return d.synErr("after object key")
	}
	d.i++
	return true
}

func (d *decoder) setKind(depth int, obj bool) {
	w := depth / 64
	for len(d.kinds) <= w {
		d.kinds = append(d.kinds, 0)
	}
	if obj {
		d.kinds[w] |= 1 << (depth % 64)
	} else {
		d.kinds[w] &^= 1 << (depth % 64)
	}
}

func (d *decoder) kind(depth int) bool { return d.kinds[depth/64]&(1<<(depth%64)) != 0 }
