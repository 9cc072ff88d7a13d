package data_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
		{"a,b\n1,x\n", `line 2, column 2 ("b"): label "x"`},
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

func TestReadCSVNonFinite(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		labels   tensor.DType
	}{
		{"x1,x2,y\n1,2,0\n3,NaN,1\n", `line 3, column 2 ("x2"): "NaN" is not a finite number`, tensor.Int32},
		{"x1,x2,y\n1,2,0.5\n3,4,-Inf\n", `line 3, column 3 ("y"): label "-Inf" is not a finite number`, tensor.Float32},
		{"x1,x2,y\n1,inf,0\n", `line 2, column 2 ("x2"): "inf"`, tensor.Int32},
		{"x1,x2,y\n1,1e39,0\n", `"1e39" is beyond float32's range`, tensor.Int32},
	} {
		_, _, err := data.ReadCSV(strings.NewReader(tc.in), true, tc.labels)
		if !errors.Is(err, data.ErrBadCSV) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "AllowNonFinite") {
			t.Errorf("%q: %v; want ErrBadCSV naming %q and the option", tc.in, err, tc.want)
		}
		x, _, err := data.ReadCSVWith(strings.NewReader(tc.in), data.CSVOptions{Header: true, Labels: tc.labels, AllowNonFinite: true})
		if err != nil || x.Shape()[1] != 2 {
			t.Errorf("%q with AllowNonFinite: %v, %v", tc.in, x, err)
		}
	}
	x, _, err := data.ReadCSVWith(strings.NewReader("3,NaN,1\n"), data.CSVOptions{Labels: tensor.Int32, AllowNonFinite: true})
	if err != nil || !math.IsNaN(float64(x.Float32s()[1])) {
		t.Errorf("AllowNonFinite reads NaN: %v, %v", x, err)
	}

	// A file's errors name it, then the line and column.
	path := filepath.Join(t.TempDir(), "train.csv")
	if err := os.WriteFile(path, []byte("a,b,y\n1,2,3\n4,nan,6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = data.ReadCSVFile(path, true, tensor.Float32)
	if want := path + `: malformed CSV data: line 3, column 2 ("b"): "nan" is not a finite number`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("ReadCSVFile: %v; want %q", err, want)
	}
}

func TestReadCSVLabelColumns(t *testing.T) {
	const in = "y1,x1,x2,y2\n0.5,1,2,-1\n1.5,3,4,-2\n"
	want := func(name string, x, y *tensor.Tensor, err error, ys []float32) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(x.Shape(), []int{2, 2}) || !slices.Equal(x.Float32s(), []float32{1, 2, 3, 4}) {
			t.Errorf("%s: features %v %v", name, x.Shape(), x.Float32s())
		}
		if !slices.Equal(y.Shape(), []int{2, 2}) || !slices.Equal(y.Float32s(), ys) {
			t.Errorf("%s: labels %v %v; want [2 2] %v", name, y.Shape(), y.Float32s(), ys)
		}
	}
	x, y, err := data.ReadCSVWith(strings.NewReader(in), data.CSVOptions{Header: true, Labels: tensor.Float32, LabelNames: []string{"y1", "y2"}})
	want("by name", x, y, err, []float32{0.5, -1, 1.5, -2})
	x, y, err = data.ReadCSVWith(strings.NewReader(in), data.CSVOptions{Header: true, Labels: tensor.Float32, LabelColumns: []int{3, 0}})
	want("by index", x, y, err, []float32{-1, 0.5, -2, 1.5})

	// One label column chosen by name is a [rows] tensor, as the last column is.
	_, y, err = data.ReadCSVWith(strings.NewReader(in), data.CSVOptions{Header: true, Labels: tensor.Float32, LabelNames: []string{"y2"}})
	if err != nil || !slices.Equal(y.Shape(), []int{2}) || !slices.Equal(y.Float32s(), []float32{-1, -2}) {
		t.Errorf("one label by name: %v, %v", y, err)
	}
	// Class indices in several columns.
	_, yi, err := data.ReadCSVWith(strings.NewReader("1,0,2\n3,1,0\n"), data.CSVOptions{Labels: tensor.Int32, LabelColumns: []int{1, 2}})
	if err != nil || !slices.Equal(yi.Shape(), []int{2, 2}) || !slices.Equal(yi.Int32s(), []int32{0, 2, 1, 0}) {
		t.Errorf("int labels: %v, %v", yi, err)
	}

	for _, tc := range []struct {
		opts data.CSVOptions
		want string
	}{
		{data.CSVOptions{Header: true, Labels: tensor.Float32, LabelNames: []string{"y3"}}, `no label column "y3"; the header has "y1", "x1", "x2", "y2"`},
		{data.CSVOptions{Header: true, Labels: tensor.Float32, LabelColumns: []int{4}}, "label column 4: line 1 has 4 columns"},
		{data.CSVOptions{Header: true, Labels: tensor.Float32, LabelColumns: []int{0, 0}}, "label column 0 is given twice"},
		{data.CSVOptions{Header: true, Labels: tensor.Float32, LabelColumns: []int{0, 1, 2, 3}}, "every one of the 4 columns is a label"},
		{data.CSVOptions{Labels: tensor.Float32, LabelNames: []string{"y1"}}, "need a header line"},
		{data.CSVOptions{Header: true, Labels: tensor.Float32, LabelNames: []string{"y1"}, LabelColumns: []int{0}}, "both LabelColumns and LabelNames"},
		{data.CSVOptions{Header: true, LabelNames: []string{"y1"}}, "labels of dtype invalid"},
	} {
		if _, _, err := data.ReadCSVWith(strings.NewReader(in), tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v; want an error naming %q", tc.opts, err, tc.want)
		}
	}
}

// TestReadCSVSpreadsheetExport: a file saved by a spreadsheet as "CSV
// UTF-8" begins with a byte-order mark, and people write "a, b, y": the
// mark is not part of the first name or number, and names are trimmed as
// the numbers are. The mark made the first column "\ufeffa" (a label
// named "a" was not found) or its first number "\ufeff1" (not a number),
// and " y" was not the label "y".
func TestReadCSVSpreadsheetExport(t *testing.T) {
	for _, tc := range []struct {
		in   string
		opts data.CSVOptions
		x, y []float32
	}{
		{"\ufeffy,a,b\n1,2,3\n", data.CSVOptions{Header: true, Labels: tensor.Float32, LabelNames: []string{"y"}}, []float32{2, 3}, []float32{1}},
		{"\ufeff1,2,3\n", data.CSVOptions{Labels: tensor.Float32}, []float32{1, 2}, []float32{3}},
		{"a, b , y\n1, 2, 3\n", data.CSVOptions{Header: true, Labels: tensor.Float32, LabelNames: []string{"y", "b"}}, []float32{1}, []float32{3, 2}},
	} {
		x, y, err := data.ReadCSVWith(strings.NewReader(tc.in), tc.opts)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if !slices.Equal(x.Float32s(), tc.x) || !slices.Equal(y.Float32s(), tc.y) {
			t.Errorf("%q: x %v, y %v; want %v and %v", tc.in, x.Float32s(), y.Float32s(), tc.x, tc.y)
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

// Two regression targets, chosen by their header names, are a [rows, 2]
// labels tensor; the other columns are the features.
func ExampleReadCSVWith() {
	const file = "x1,x2,y1,x3,y2\n1,2,0.5,3,-1\n4,5,1.5,6,-2\n"
	x, y, err := data.ReadCSVWith(strings.NewReader(file), data.CSVOptions{
		Header: true, Labels: tensor.Float32, LabelNames: []string{"y1", "y2"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(x.Shape(), x.Float32s(), y.Shape(), y.Float32s())

	_, _, err = data.ReadCSVWith(strings.NewReader("x1,y\n1,2\nNaN,3\n"), data.CSVOptions{Header: true, Labels: tensor.Float32})
	fmt.Println(err)
	// Output:
	// [2 3] [1 2 3 4 5 6] [2 2] [0.5 -1 1.5 -2]
	// data: malformed CSV data: line 3, column 1 ("x1"): "NaN" is not a finite number (CSVOptions.AllowNonFinite accepts NaN and infinities)
}
