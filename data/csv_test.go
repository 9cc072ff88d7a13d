package data_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/distflow/distflow/data"
	"github.com/distflow/distflow/tensor"
)

func TestReadCSV(t *testing.T) {
	x, y, err := data.ReadCSV(strings.NewReader("a,b,label\n1,2.5,0\n-3,4e1,2\n"), true, tensor.Int32)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(x.Shape(), []int{2, 2}) || !slices.Equal(x.Float32s(), []float32{1, 2.5, -3, 40}) || !slices.Equal(y.Int32s(), []int32{0, 2}) {
		t.Errorf("x %v, y %v", x, y)
	}
	_, yf, err := data.ReadCSV(strings.NewReader("1,0.25\n"), false, tensor.Float32)
	if err != nil || !slices.Equal(yf.Float32s(), []float32{0.25}) {
		t.Errorf("float labels: %v, %v", yf, err)
	}
	for _, tc := range []struct{ in, want string }{
		{"a,b\n1,x\n", `line 2, column 2: label "x"`},
		{"1,2\nq,1\n", `line 2, column 1: "q" is not a number`},
		{"1,2\n1,2,3\n", "wrong number of fields"},
		{"5\n", "1 column(s)"},
		{"a,b\n", "no examples"},
		{"1,-1\n", "not a class index"},
	} {
		header := strings.HasPrefix(tc.in, "a,")
		_, _, err := data.ReadCSV(strings.NewReader(tc.in), header, tensor.Int32)
		if !errors.Is(err, data.ErrBadCSV) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want ErrBadCSV naming %q", tc.in, err, tc.want)
		}
	}
}

func FuzzReadCSV(f *testing.F) {
	f.Add("a,b,label\n1,2.5,0\n-3,4e1,2\n", true)
	f.Add("1,\"2\",3\n", false)
	f.Fuzz(func(t *testing.T, in string, header bool) {
		x, y, err := data.ReadCSV(strings.NewReader(in), header, tensor.Int32)
		if err == nil && (x.Shape()[0] != y.Shape()[0] || x.Shape()[0] == 0) {
			t.Fatalf("%q: x %v and y %v disagree", in, x.Shape(), y.Shape())
		}
	})
}
