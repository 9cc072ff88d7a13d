package data

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/distflow/distflow/tensor"
)

// ErrBadCSV is wrapped by the errors of ReadCSV for malformed data.
var ErrBadCSV = errors.New("malformed CSV data")

// MaxCSVValues bounds the values one ReadCSV call reads (rows times
// columns): a hostile or mistaken file cannot make it allocate without end.
const MaxCSVValues = 1 << 28

// ReadCSV reads examples from CSV: an optional header line, then one
// example per row, its features (numbers) and, in the last column, its
// label: a class index read as int32 (labels dtype tensor.Int32) or a
// number read as float32 (tensor.Float32). It returns the features as a
// float32 [rows, columns-1] tensor and the labels as a [rows] tensor.
// Errors name the line and column at fault.
func ReadCSV(r io.Reader, header bool, labels tensor.DType) (x, y *tensor.Tensor, err error) {
	if labels != tensor.Int32 && labels != tensor.Float32 {
		return nil, nil, fmt.Errorf("data: ReadCSV: labels of dtype %v: want int32 (classes) or float32", labels)
	}
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	var xs []float32
	var ys32 []int32
	var ysF []float32
	cols := 0
	for line := 1; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("data: %w: %v", ErrBadCSV, err)
		}
		if header && line == 1 {
			continue
		}
		if cols == 0 {
			if cols = len(rec); cols < 2 {
				return nil, nil, fmt.Errorf("data: %w: line %d has %d column(s); want the features, then the label", ErrBadCSV, line, cols)
			}
		}
		if len(xs)+cols > MaxCSVValues {
			return nil, nil, fmt.Errorf("data: %w: more than %d values", ErrBadCSV, MaxCSVValues)
		}
		for c, v := range rec[:cols-1] {
			f, err := strconv.ParseFloat(v, 32)
			if err != nil {
				return nil, nil, fmt.Errorf("data: %w: line %d, column %d: %q is not a number", ErrBadCSV, line, c+1, v)
			}
			xs = append(xs, float32(f))
		}
		label := rec[cols-1]
		if labels == tensor.Int32 {
			k, err := strconv.ParseInt(label, 10, 32)
			if err != nil || k < 0 {
				return nil, nil, fmt.Errorf("data: %w: line %d, column %d: label %q is not a class index", ErrBadCSV, line, cols, label)
			}
			ys32 = append(ys32, int32(k))
		} else {
			f, err := strconv.ParseFloat(label, 32)
			if err != nil {
				return nil, nil, fmt.Errorf("data: %w: line %d, column %d: label %q is not a number", ErrBadCSV, line, cols, label)
			}
			ysF = append(ysF, float32(f))
		}
	}
	rows := len(ys32) + len(ysF)
	if rows == 0 {
		return nil, nil, fmt.Errorf("data: %w: no examples", ErrBadCSV)
	}
	x = tensor.MustFromSlice(xs, rows, cols-1)
	if labels == tensor.Int32 {
		return x, tensor.MustFromSlice(ys32, rows), nil
	}
	return x, tensor.MustFromSlice(ysF, rows), nil
}

// ReadCSVFile is ReadCSV of the file at path.
func ReadCSVFile(path string, header bool, labels tensor.DType) (x, y *tensor.Tensor, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	if x, y, err = ReadCSV(f, header, labels); err != nil {
		return nil, nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return x, y, nil
}
