package serving

import (
	"errors"
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
