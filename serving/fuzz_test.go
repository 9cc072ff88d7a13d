package serving

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/distflow/distflow/savedmodel"
	"github.com/distflow/distflow/tensor"
)

// FuzzDecodeRequest: any body decodes into inputs of the signature's dtypes
// or fails with errBadRequest; never a panic. Seeds: testdata/fuzz/FuzzDecodeRequest.
func FuzzDecodeRequest(f *testing.F) {
	sig := savedmodel.Signature{
		Inputs: map[string]savedmodel.TensorInfo{
			"x": {Name: "x:0", DType: tensor.Float32, Shape: tensor.MakeShape(-1, 3)},
			"k": {Name: "k:0", DType: tensor.Int32, Shape: tensor.MakeShape(-1)},
		},
		Outputs: map[string]savedmodel.TensorInfo{"y": {Name: "y:0", DType: tensor.Float32, Shape: tensor.MakeShape(-1, 2)}},
	}
	f.Add([]byte(`{"instances":[{"x":[1,2,3],"k":1}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeRequest(body, sig)
		if err != nil {
			if !errors.Is(err, errBadRequest) {
				t.Fatalf("error %v does not wrap errBadRequest", err)
			}
			return
		}
		for name, in := range req.inputs {
			ti, ok := sig.Inputs[name]
			if !ok || in.DType() != ti.DType {
				t.Fatalf("decoded input %q of dtype %v", name, in.DType())
			}
		}
		if req.rows && req.n <= 0 {
			t.Fatalf("row format with %d instances", req.n)
		}
	})
}

// fuzzSignatures are the signatures FuzzFastDecoder decodes against: two
// named inputs, and one input of each dtype the JSON API takes.
var fuzzSignatures = func() []savedmodel.Signature {
	out := []savedmodel.Signature{{
		Inputs: map[string]savedmodel.TensorInfo{
			"x": {Name: "x:0", DType: tensor.Float32, Shape: tensor.MakeShape(-1, 3)},
			"k": {Name: "k:0", DType: tensor.Int32, Shape: tensor.MakeShape(-1)},
		},
	}}
	for _, dt := range []tensor.DType{tensor.Float32, tensor.Float64, tensor.Int32, tensor.Int64, tensor.Uint8, tensor.Bool} {
		out = append(out, savedmodel.Signature{Inputs: map[string]savedmodel.TensorInfo{
			"x": {Name: "x:0", DType: dt, Shape: tensor.MakeShape(-1, 3)},
		}})
	}
	return out
}()

// FuzzDecoder: the request decoder, in one pass and in two, agrees with the
// reference decoder (encoding/json's generic values) on every body: both
// accept it and decode the same request, bit for bit, or both refuse it.
func FuzzDecoder(f *testing.F) {
	for _, s := range []string{
		`{"instances":[{"x":[1,2,3],"k":1}]}`,
		`{"signature_name":"serving_default","instances":[{"x":[1,2,3],"k":1},{"k":-2,"x":[4,5,6.5e-3]}]}`,
		`{"inputs":{"x":[[1,2,3]],"k":[7]}}`,
		`{"instances":[[0.1,0.25,-3.5]]}`,
		`{"instances":[[[1,2],[3,4]],[[5,6],[7,8]]]}`,
		`{"instances":[[],[]]}`,
		`{"inputs":[[true,false,true]]}`,
		`{"inputs":1.5}`,
		` { "inputs" : [ [ 0.30000001 , 1E3 , -0 ] ] } `,
		`{"instances":[[0.83412766,0.000123,12345678901234567,1e-45,3.4028235e38]]}`,
		`{"instan\u0063es":[[1,2,3]],"x":{"a":[null,true,"\ud834\udd1e"]}}`,
		`{"instances":[{"x":[1,2,3],"k":1,"k":2}],"instances":[{"k":3,"x":[NaN,Infinity,-Infinity],"\u006b":4}]}`,
		`{"inputs":{"x":[[1,2,3]],"k":[1],"x":[[4,5,6]]}}`,
		`{"instances":[[1,"\u00001.5",3]],"signature_name":null}`,
		`{"instances":[[1,2,3],[4,5]]}`,
		`{"instances":[[1,2,3],[4,5,6,7]]}`,
		`{"instances":[[[1]],2]}`,
		`{"instances":[1e400,-1,"a",{},null]}`,
		`{"inputs":{"x":[[1,2,3]]},"inputs":{"k":[1]},"signature_name":"x"}`,
		`[1,{"a":NaN}]`,
	} {
		for i := range fuzzSignatures {
			f.Add([]byte(s), uint8(i))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		sig := fuzzSignatures[int(which)%len(fuzzSignatures)]
		want, werr := decodeGeneral(body, sig)
		for _, one := range []bool{true, false} {
			got, err := decodeWith(body, sig, sig.InputNames(), one)
			if (err == nil) != (werr == nil) {
				t.Fatalf("one pass %v: error %v; reference: %v", one, err, werr)
			}
			if err != nil {
				if !errors.Is(err, errBadRequest) {
					t.Fatalf("error %v does not wrap errBadRequest", err)
				}
				continue
			}
			if got.rows != want.rows || got.n != want.n || len(got.inputs) != len(want.inputs) {
				t.Fatalf("one pass %v: rows %v n %d %d inputs; reference: rows %v n %d %d inputs", one, got.rows, got.n, len(got.inputs), want.rows, want.n, len(want.inputs))
			}
			for name, w := range want.inputs {
				g := got.inputs[name]
				if g == nil || g.DType() != w.DType() || !slices.Equal(g.Shape(), w.Shape()) || !bytes.Equal(g.RawBytes(), w.RawBytes()) {
					t.Fatalf("one pass %v: input %q: %v, reference %v", one, name, g, w)
				}
			}
		}
	})
}

// TestParseFloat32 compares the fast float32 conversion with strconv on
// the shortest forms of random float32s and on random decimal literals.
func TestParseFloat32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	check := func(lit string) {
		t.Helper()
		want, werr := strconv.ParseFloat(lit, 32)
		got, ok := parseFloat32([]byte(lit))
		if ok != (werr == nil) || math.Float32bits(got) != math.Float32bits(float32(want)) {
			t.Fatalf("parseFloat32(%q) = %v (%#x), %v; strconv: %v (%#x), %v", lit, got, math.Float32bits(got), ok, float32(want), math.Float32bits(float32(want)), werr)
		}
	}
	for _, lit := range []string{"0", "-0", "0.0", "-0.000", "1", "-1", "0.1", "16777217", "16777219", "0.30000001", "3.4028235e38", "3.5e38", "1e-46", "123456789012345", "1234567890123456", "0.0000000000000000000001", "0.00000000000000000000001", "1e22", "1e23", "123456789012345e22", "3.4028235e38", "3.4028236e38", "1.17549435e-38", "1.1754942e-38", "-0e5", "0.0e-400", "1e400", "1E+2", "9007199254740993e-22"} {
		check(lit)
	}
	for range 200000 {
		f := math.Float32frombits(r.Uint32())
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			continue
		}
		check(string(appendFloat(nil, float64(f), 32)))
		check(strconv.FormatFloat(float64(f), 'f', -1, 64))
		check(strconv.FormatFloat(float64(r.Float32()), 'f', r.IntN(16), 64))
		// Decimal literals near float32 midpoints: m.5 ulp.
		m := r.Uint32N(1<<24) | 1<<23
		e := r.IntN(40) - 30
		check(strconv.FormatFloat(math.Ldexp(float64(m)+0.5, e), 'f', -1, 64))
		var sb strings.Builder
		for range 1 + r.IntN(17) {
			sb.WriteByte(byte('0' + r.IntN(10)))
		}
		s := sb.String()
		if p := r.IntN(len(s) + 1); p < len(s) {
			s = s[:p] + "." + s[p:]
			if p == 0 {
				s = "0" + s
			}
		}
		if s[0] == '0' && len(s) > 1 && s[1] != '.' {
			s = "1" + s
		}
		check(s)
		check("-" + s + "e" + strconv.Itoa(r.IntN(60)-30))
		check(s + "E+" + strconv.Itoa(r.IntN(25)))
	}
}

// TestDecoderForms: the request forms clients send, and rare ones
// (escapes, repeated keys), decode in one pass and in two; bodies in error
// are refused with the error of TF Serving's API.
func TestDecoderForms(t *testing.T) {
	two, one := fuzzSignatures[0], fuzzSignatures[1]
	for _, c := range []struct {
		sig  savedmodel.Signature
		body string
		err  string // "" if valid
	}{
		{one, `{"instances":[[0.1,0.2,0.3]]}`, ""},
		{one, `{"instances": [[0.1, 0.2, 0.3], [1e-7, -2, 3.5]]}` + "\n", ""},
		{one, `{"signature_name":"serving_default","instances":[{"x":[1,2,3]}]}`, ""},
		{one, `{"inputs":[[1,2,3]]}`, ""},
		{two, `{"instances":[{"x":[1,2,3],"k":1},{"k":2,"x":[4,5,6]}]}`, ""},
		{two, `{"inputs":{"x":[[1,2,3]],"k":[1]}}`, ""},
		{one, `{"instances":[[1,2,3]],"instances":[[1,2,3]]}`, ""},
		{one, `{"instan\u0063es":[[1,2,3]]}`, ""},
		{one, `{"instances":[[1,2,3]],"other":{"a":["\u0061",[],{}]}}`, ""},
		{two, `{"instances":[{"x":[1,2,3],"k":1,"k":2}]}`, ""},
		{two, `{"inputs":{"x":[[1,2,3]],"k":[1],"k":[2]}}`, ""},
		{one, `{"instances":[[0.1,0.2,"a"]]}`, `input "x": element [0 2]: a string is not a number`},
		{one, `{"instances":[[1,2,3],[1,2]]}`, `the element at [1] is a list of 2, want a list of 3`},
		{one, `{"instances":[[1,2,3],[1,2,3,4]]}`, `the element at [1] is a list of 4, want a list of 3`},
		{one, `{"instances":[]}`, `'instances' is an empty list`},
		{one, `{"instances":[[1,2,3]]} x`, `invalid character 'x' after top-level value`},
		{one, `{"instances":[[01,2,3]]}`, `invalid character '1' after array element`},
		{one, `{"instances":[[1,2,3]]`, `unexpected end of JSON input`},
		{two, `{"instances":[{"x":[1,2,3]}]}`, `instance 0: missing input "k"`},
		{two, `{"instances":[{"x":[1,2],"k":1},{"x":[1,2,3],"k":1,"z":1}]}`, `instance 1: unknown input "z"`},
		{two, `{"instances":[{"x":[1,2,3],"k":1.5},{"x":[1,2,3],"k":1}]}`, `input "k": element [0]: 1.5 is not an int32`},
		{one, `{"instances":[[1,2,3]],"signature_name":"serving\u005fdefault"}`, ""},
		{one, `{"instances":[[1,2,3]],"signature_name":7}`, `'signature_name' must be a string`},
		{one, `{"instances":[[1,2,3e50]]}`, `input "x": element [0 2]: 3e50 is out of the range of float32`},
		{one, `{"instances":[[1,2,3]],NaN:1}`, `invalid character 'N' looking for beginning of object key string`},
		{one, `[[1,2,3]]`, `JSON Parse error: the request body must be a JSON object, not a list`},
		{one, `{"instances":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}`, `more than 32 nested lists`},
		{one, `{"instances":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, `exceeded max depth`},
	} {
		for _, onePass := range []bool{true, false} {
			_, err := decodeWith([]byte(c.body), c.sig, c.sig.InputNames(), onePass)
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("one pass %v: %.80s: error %v, want %q", onePass, c.body, err, c.err)
			}
		}
		if _, err := decodeGeneral([]byte(c.body), c.sig); (err == nil) != (c.err == "") {
			t.Errorf("reference: %.80s: error %v", c.body, err)
		}
	}
}

// TestNonFiniteTokens: NaN, Infinity and -Infinity, which the server writes,
// are read back as numbers where a value starts, as TF Serving does, and
// nowhere else: not inside strings, not as parts of other tokens, not into
// integer inputs.
func TestNonFiniteTokens(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"a":[1,2]}`, `{"a":[1,2]}`},
		{`[NaN, Infinity,-Infinity ]`, `["\u0000NaN", "\u0000Infinity","\u0000-Infinity" ]`},
		{`{"x":NaN}`, `{"x":"\u0000NaN"}`},
		{`{"NaN":"NaN","s":"a\"NaN"}`, `{"NaN":"NaN","s":"a\"NaN"}`},
		{`[NaNa, Infinity1, 1NaN, -NaN, Inf]`, `[NaNa, Infinity1, 1NaN, -NaN, Inf]`},
		{`NaN`, `"\u0000NaN"`},
	} {
		if got := string(quoteNonFinite([]byte(c.in))); got != c.want {
			t.Errorf("quoteNonFinite(%s) = %s, want %s", c.in, got, c.want)
		}
	}
	sig := fuzzSignatures[0] // x: float32 [?,3], k: int32 [?]
	req, err := decodeRequest([]byte(`{"instances":[{"x":[NaN,Infinity,-Infinity],"k":1}]}`), sig)
	if err != nil {
		t.Fatal(err)
	}
	x := req.inputs["x"].Float32s()
	if !math.IsNaN(float64(x[0])) || !math.IsInf(float64(x[1]), 1) || !math.IsInf(float64(x[2]), -1) {
		t.Errorf("decoded %v, want [NaN +Inf -Inf]", x)
	}
	for body, want := range map[string]string{
		`{"instances":[{"x":[1,2,3],"k":NaN}]}`:                    `input "k": element [0]: NaN is not an int32`,
		`{"instances":[{"x":[1,2,"\u0000NaN"],"k":1}]}`:            "", // a client's own NUL string: as a NaN, harmlessly
		`{"instances":[{"x":[1,2,"NaN"],"k":1}]}`:                  `input "x": element [0 2]: a string is not a number`,
		`{"instances":[{"x":[1,2,nan],"k":1}]}`:                    "JSON Parse error",
		`{"signature_name":NaN,"instances":[{"x":[1,2,3],"k":1}]}`: "not found in signature def",
	} {
		_, err := decodeRequest([]byte(body), sig)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: error %v, want %q", body, err, want)
		}
	}
}

// FuzzQuoteNonFinite: standard JSON has no bare NaN or Infinity, so
// quoteNonFinite leaves every valid body as it is; on others it never
// panics, and a body it changes gains only the quoted tokens.
func FuzzQuoteNonFinite(f *testing.F) {
	for _, s := range []string{`{"a":[1,NaN,-Infinity]}`, `["NaN\"",Infinity]`, `[NaNa]`, `{"x":"\\"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out := quoteNonFinite(body)
		if json.Valid(body) && !bytes.Equal(out, body) {
			t.Fatalf("valid JSON %q changed to %q", body, out)
		}
		undo := strings.NewReplacer(`"\u0000NaN"`, "NaN", `"\u0000Infinity"`, "Infinity", `"\u0000-Infinity"`, "-Infinity")
		if undo.Replace(string(out)) != undo.Replace(string(body)) { // (a body may hold quoted tokens of its own)
			t.Fatalf("%q became %q: more than the tokens quoted", body, out)
		}
	})
}
