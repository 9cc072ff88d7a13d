package serving

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/tensor"
)

// The reference decoder: encoding/json's generic values, read as TF
// Serving's REST API defines a predict request. It is what the request
// decoder (decode.go) must agree with, at many times its memory and CPU:
// FuzzDecoder compares them.

// decodeGeneral is decodeRequest through encoding/json's generic values:
// it accepts any valid request and words every error.
func decodeGeneral(body []byte, sig savedmodel.Signature) (*request, error) {
	body = quoteNonFinite(body)
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, badRequest("JSON Parse error: %v", err)
	}
	if top == nil {
		return nil, badRequest("the request body must be a JSON object")
	}
	if raw, ok := top["signature_name"]; ok {
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			return nil, badRequest("'signature_name' must be a string")
		}
		if name != defaultSignature && name != "" {
			return nil, badRequest("Serving signature name: %q not found in signature def (the model has only %q)", name, defaultSignature)
		}
	}
	inst, hasInst := top["instances"]
	cols, hasCols := top["inputs"]
	switch {
	case hasInst && hasCols:
		return nil, badRequest("Request body may have only one of 'instances' (row format) or 'inputs' (columnar format), not both")
	case !hasInst && !hasCols:
		return nil, badRequest("Missing 'instances' or 'inputs' key")
	}
	names := sig.InputNames()
	if hasInst {
		return decodeInstances(inst, sig, names)
	}
	return decodeColumns(cols, sig, names)
}

func parseAny(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, badRequest("JSON Parse error: %v", err)
	}
	return v, nil
}

func decodeInstances(raw json.RawMessage, sig savedmodel.Signature, names []string) (*request, error) {
	v, err := parseAny(raw)
	if err != nil {
		return nil, err
	}
	list, ok := v.([]any)
	if !ok {
		return nil, badRequest("'instances' must be a JSON list")
	}
	if len(list) == 0 {
		return nil, badRequest("'instances' is an empty list")
	}
	perInput := map[string][]any{}
	if _, named := list[0].(map[string]any); named {
		for i, e := range list {
			obj, ok := e.(map[string]any)
			if !ok {
				return nil, badRequest("instance %d is not a JSON object, as instance 0 is: instances must all have named inputs or all be bare values", i)
			}
			for name := range obj {
				if _, ok := sig.Inputs[name]; !ok {
					return nil, badRequest("instance %d: unknown input %q (the model's inputs are %s)", i, name, strings.Join(names, ", "))
				}
			}
			for _, name := range names {
				val, ok := obj[name]
				if !ok {
					return nil, badRequest("instance %d: missing input %q", i, name)
				}
				perInput[name] = append(perInput[name], val)
			}
		}
	} else {
		if len(names) != 1 {
			return nil, badRequest("the model has %d inputs (%s): each instance must be a JSON object keyed by input name", len(names), strings.Join(names, ", "))
		}
		perInput[names[0]] = list
	}
	req := &request{rows: true, n: len(list), inputs: map[string]*tensor.Tensor{}}
	for name, vals := range perInput {
		// The list of instances of one input is a tensor whose first
		// dimension is the batch: ragged instances are rejected there.
		t, err := toTensor(name, vals, sig.Inputs[name].DType)
		if err != nil {
			return nil, err
		}
		req.inputs[name] = t
	}
	return req, nil
}

func decodeColumns(raw json.RawMessage, sig savedmodel.Signature, names []string) (*request, error) {
	v, err := parseAny(raw)
	if err != nil {
		return nil, err
	}
	req := &request{inputs: map[string]*tensor.Tensor{}}
	obj, named := v.(map[string]any)
	if !named {
		if len(names) != 1 {
			return nil, badRequest("the model has %d inputs (%s): 'inputs' must be a JSON object keyed by input name", len(names), strings.Join(names, ", "))
		}
		obj = map[string]any{names[0]: v}
	}
	for name, val := range obj {
		ti, ok := sig.Inputs[name]
		if !ok {
			return nil, badRequest("unknown input %q (the model's inputs are %s)", name, strings.Join(names, ", "))
		}
		t, err := toTensor(name, val, ti.DType)
		if err != nil {
			return nil, err
		}
		req.inputs[name] = t
	}
	for _, name := range names {
		if _, ok := req.inputs[name]; !ok {
			return nil, badRequest("missing input %q", name)
		}
	}
	return req, nil
}

// toTensor converts a JSON value (nested lists of numbers or booleans) to a
// tensor of dtype dt, rejecting ragged lists and values of another type.
func toTensor(name string, v any, dt tensor.DType) (*tensor.Tensor, error) {
	var shape []int
	for x := v; ; {
		l, ok := x.([]any)
		if !ok {
			break
		}
		shape = append(shape, len(l))
		if len(shape) > 32 {
			return nil, badRequest("input %q: more than 32 nested lists", name)
		}
		if len(l) == 0 {
			break
		}
		x = l[0]
	}
	n := tensor.NumElements(shape)
	t := tensor.New(dt, shape...)
	i := 0
	var walk func(x any, depth int, path []int) error
	walk = func(x any, depth int, path []int) error {
		if depth < len(shape) {
			l, ok := x.([]any)
			if !ok || len(l) != shape[depth] {
				got := "a scalar"
				if ok {
					got = fmt.Sprintf("a list of %d", len(l))
				}
				return badRequest("input %q: ragged value: the element at %v is %s, want a list of %d (all lists at one depth must have the same length)", name, path, got, shape[depth])
			}
			for j, e := range l {
				if err := walk(e, depth+1, append(path, j)); err != nil {
					return err
				}
			}
			return nil
		}
		if _, isList := x.([]any); isList {
			return badRequest("input %q: ragged value: the element at %v is a list, want a scalar of type %v", name, path, dt)
		}
		if err := setElem(t, i, x, dt); err != nil {
			return badRequest("input %q: element %v: %v", name, path, err)
		}
		i++
		return nil
	}
	if err := walk(v, 0, nil); err != nil {
		return nil, err
	}
	if i != n {
		return nil, badRequest("input %q: %d elements for shape %v", name, i, shape)
	}
	return t, nil
}

// nonFiniteMark starts the string that quoteNonFinite puts in place of a
// bare NaN, Infinity or -Infinity: a NUL, which a JSON string can hold only
// escaped, so that no ordinary client string is read as a number.
const nonFiniteMark = "\x00"

// quoteNonFinite returns body with each bare NaN, Infinity and -Infinity
// token (outside strings, where a value starts) made a JSON string of
// nonFiniteMark and the token, which setElem reads back as the number.
// TensorFlow Serving accepts these tokens (its REST API's "JSON
// conformance") and writes them, as this server does: a client can send
// back what it was answered. body is returned as is when it has none.
func quoteNonFinite(body []byte) []byte {
	var out []byte
	from := 0         // body[from:i] is not yet in out
	prev := byte('[') // the last byte outside strings and spaces: a value may start after [ , :
	var open []byte   // the containers open: a ',' in an object comes before a key
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch c {
		case '{', '[':
			open = append(open, c)
		case '}', ']':
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
		}
		switch c {
		case '"':
			for i++; i < len(body) && body[i] != '"'; i++ {
				if body[i] == '\\' {
					i++
				}
			}
			prev = '"'
			continue
		case ' ', '\t', '\n', '\r':
			continue
		}
		if prev == '[' || prev == ':' || prev == ',' && (len(open) == 0 || open[len(open)-1] == '[') {
			for _, tok := range [...]string{"NaN", "Infinity", "-Infinity"} {
				end := i + len(tok)
				if hasPrefix(body[i:], tok) && (end == len(body) || !isTokenByte(body[end])) {
					out = append(append(append(append(out, body[from:i]...), '"'), `\u0000`+tok...), '"')
					from, i, c = end, end-1, '"'
					break
				}
			}
		}
		prev = c
	}
	if out == nil {
		return body
	}
	return append(out, body[from:]...)
}

func setElem(t *tensor.Tensor, i int, x any, dt tensor.DType) error {
	if s, ok := x.(string); ok && strings.HasPrefix(s, nonFiniteMark) {
		x = json.Number(s[len(nonFiniteMark):]) // NaN or ±Infinity, quoted by quoteNonFinite
	}
	if dt == tensor.Bool {
		b, ok := x.(bool)
		if !ok {
			return fmt.Errorf("%s is not a boolean (the input is %v)", jsonKind(x), dt)
		}
		t.Bools()[i] = b
		return nil
	}
	num, ok := x.(json.Number)
	if !ok {
		return fmt.Errorf("%s is not a number (the input is %v)", jsonKind(x), dt)
	}
	s := string(num)
	switch dt {
	case tensor.Float32:
		f, err := strconv.ParseFloat(s, 32)
		if err != nil {
			return fmt.Errorf("%s is out of the range of float32", s)
		}
		t.Float32s()[i] = float32(f)
	case tensor.Float64:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("%s is out of the range of float64", s)
		}
		t.Float64s()[i] = f
	case tensor.Int32, tensor.Int64, tensor.Uint8:
		bits := map[tensor.DType]int{tensor.Int32: 32, tensor.Int64: 64, tensor.Uint8: 8}[dt]
		if dt == tensor.Uint8 {
			u, err := strconv.ParseUint(s, 10, bits)
			if err != nil {
				return fmt.Errorf("%s is not a %v", s, dt)
			}
			t.Uint8s()[i] = uint8(u)
			return nil
		}
		v, err := strconv.ParseInt(s, 10, bits)
		if err != nil {
			return fmt.Errorf("%s is not an %v", s, dt)
		}
		if dt == tensor.Int32 {
			t.Int32s()[i] = int32(v)
		} else {
			t.Int64s()[i] = v
		}
	default:
		return fmt.Errorf("dtype %v is not supported over JSON", dt)
	}
	return nil
}

func jsonKind(x any) string {
	switch x.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case nil:
		return "null"
	}
	return "a number"
}
