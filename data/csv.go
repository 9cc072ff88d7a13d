package data

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/distflow/distflow/tensor"
)

// ErrBadCSV is wrapped by the errors of ReadCSV for malformed data.
var ErrBadCSV = errors.New("malformed CSV data")

// MaxCSVValues bounds the values one ReadCSV call reads (rows times
// columns): a hostile or mistaken file cannot make it allocate without end.
const MaxCSVValues = 1 << 28

// CSVOptions says how ReadCSVWith reads a CSV file: which columns are the
// labels, and of what dtype. Every other column is a feature.
type CSVOptions struct {
	// Header says the first line names the columns.
	Header bool
	// Labels is the labels' dtype: tensor.Int32 reads class indices,
	// tensor.Float32 numbers (regression targets). Required.
	Labels tensor.DType
	// LabelColumns are the label columns by index (0 is the first column),
	// in the order of the labels' last dimension.
	LabelColumns []int
	// LabelNames are the label columns by name, from the header (which
	// Header must say there is; its names are read without surrounding
	// spaces, as numbers are). At most one of LabelColumns and
	// LabelNames is set; with neither, the last column is the label.
	LabelNames []string
	// AllowNonFinite accepts NaN and infinities ("NaN", "Inf", "-Inf",
	// and numbers beyond float32's range) in float columns. By default
	// they are refused: a NaN read silently makes the loss NaN many steps
	// later, where it looks like a learning rate too high. Set it only
	// when the model handles them (masks them out, say).
	AllowNonFinite bool
}

// ReadCSV reads examples from CSV: an optional header line, then one
// example per row, its features (numbers) and, in the last column, its
// label: a class index read as int32 (labels dtype tensor.Int32) or a
// number read as float32 (tensor.Float32). It returns the features as a
// float32 [rows, columns-1] tensor and the labels as a [rows] tensor.
// NaN and infinities are refused. Errors name the line and column at
// fault. It is ReadCSVWith with CSVOptions{Header: header, Labels: labels}.
func ReadCSV(r io.Reader, header bool, labels tensor.DType) (x, y *tensor.Tensor, err error) {
	return ReadCSVWith(r, CSVOptions{Header: header, Labels: labels})
}

// ReadCSVFile is ReadCSV of the file at path; its errors name the file.
func ReadCSVFile(path string, header bool, labels tensor.DType) (x, y *tensor.Tensor, err error) {
	return ReadCSVFileWith(path, CSVOptions{Header: header, Labels: labels})
}

// ReadCSVWith reads examples from CSV as opts says: an optional header
// line, then one example per row. It returns the feature columns, in
// order, as a float32 [rows, features] tensor, and the label columns as
// a [rows] tensor when there is one label column or a [rows, k] tensor
// when there are k > 1 (several regression targets). A byte-order mark
// at the start (a spreadsheet's "CSV UTF-8") is skipped. Errors wrap
// ErrBadCSV and name the line and column at fault (and the column's name
// when there is a header).
func ReadCSVWith(r io.Reader, opts CSVOptions) (x, y *tensor.Tensor, err error) {
	return readCSV(r, "", opts)
}

// ReadCSVFileWith is ReadCSVWith of the file at path; its errors name the
// file.
func ReadCSVFileWith(path string, opts CSVOptions) (x, y *tensor.Tensor, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("data: %w", err)
	}
	defer f.Close()
	return readCSV(f, path, opts)
}

// csvReader is one read: the options, the columns' roles once known, and
// the values read so far.
type csvReader struct {
	opts   CSVOptions
	where  string // "path: " or ""
	names  []string
	cols   int
	labels []int // label columns, in label order
	isLab  []bool
	xs     []float32
	ys32   []int32
	ysF    []float32
	rows   int
}

// bad is the error for the value of column c (from 0) at line.
func (rd *csvReader) bad(line, c int, format string, args ...any) error {
	col := fmt.Sprintf("column %d", c+1)
	if c < len(rd.names) {
		col += fmt.Sprintf(" (%q)", rd.names[c])
	}
	return fmt.Errorf("data: %s%w: line %d, %s: %s", rd.where, ErrBadCSV, line, col, fmt.Sprintf(format, args...))
}

func readCSV(r io.Reader, path string, opts CSVOptions) (x, y *tensor.Tensor, err error) {
	rd := &csvReader{opts: opts}
	if path != "" {
		rd.where = path + ": "
	}
	if opts.Labels != tensor.Int32 && opts.Labels != tensor.Float32 {
		return nil, nil, fmt.Errorf("data: %sReadCSV: labels of dtype %v: want int32 (classes) or float32", rd.where, opts.Labels)
	}
	if len(opts.LabelColumns) > 0 && len(opts.LabelNames) > 0 {
		return nil, nil, fmt.Errorf("data: %sReadCSV: both LabelColumns and LabelNames are set; want one", rd.where)
	}
	if len(opts.LabelNames) > 0 && !opts.Header {
		return nil, nil, fmt.Errorf("data: %sReadCSV: LabelNames %q need a header line (CSVOptions.Header)", rd.where, opts.LabelNames)
	}
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	for first := true; ; first = false {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("data: %s%w: %v", rd.where, ErrBadCSV, err)
		}
		line, _ := cr.FieldPos(0)
		if first {
			// A spreadsheet's "CSV UTF-8" begins with a byte-order mark,
			// which belongs to no name or number.
			rec[0] = strings.TrimPrefix(rec[0], "\ufeff")
			if err := rd.columns(rec, line); err != nil {
				return nil, nil, err
			}
			if opts.Header {
				continue
			}
		}
		if err := rd.row(cr, rec); err != nil {
			return nil, nil, err
		}
	}
	if rd.rows == 0 {
		return nil, nil, fmt.Errorf("data: %s%w: no examples", rd.where, ErrBadCSV)
	}
	k := len(rd.labels)
	x = tensor.MustFromSlice(rd.xs, rd.rows, rd.cols-k)
	ydims := []int{rd.rows}
	if k > 1 {
		ydims = append(ydims, k)
	}
	if opts.Labels == tensor.Int32 {
		return x, tensor.MustFromSlice(rd.ys32, ydims...), nil
	}
	return x, tensor.MustFromSlice(rd.ysF, ydims...), nil
}

// columns learns the columns' roles from the first record (the header,
// when there is one).
func (rd *csvReader) columns(rec []string, line int) error {
	rd.cols = len(rec)
	if rd.opts.Header {
		// Names are trimmed as numbers are: "a, b, y" names "b" and "y".
		rd.names = make([]string, len(rec))
		for i, n := range rec {
			rd.names[i] = strings.TrimSpace(n)
		}
	}
	rd.isLab = make([]bool, rd.cols)
	add := func(c int, what string) error {
		if c < 0 || c >= rd.cols {
			return fmt.Errorf("data: %s%w: label column %s: line %d has %d columns", rd.where, ErrBadCSV, what, line, rd.cols)
		}
		if rd.isLab[c] {
			return fmt.Errorf("data: %s%w: label column %s is given twice", rd.where, ErrBadCSV, what)
		}
		rd.isLab[c] = true
		rd.labels = append(rd.labels, c)
		return nil
	}
	switch {
	case len(rd.opts.LabelNames) > 0:
		for _, n := range rd.opts.LabelNames {
			c := -1
			for i, h := range rd.names {
				if h == n {
					c = i
					break
				}
			}
			if c < 0 {
				return fmt.Errorf("data: %s%w: no label column %q; the header has %s", rd.where, ErrBadCSV, n, quoteList(rd.names))
			}
			if err := add(c, strconv.Quote(n)); err != nil {
				return err
			}
		}
	case len(rd.opts.LabelColumns) > 0:
		for _, c := range rd.opts.LabelColumns {
			if err := add(c, strconv.Itoa(c)); err != nil {
				return err
			}
		}
	default:
		if rd.cols < 2 {
			return fmt.Errorf("data: %s%w: line %d has %d column(s); want the features, then the label", rd.where, ErrBadCSV, line, rd.cols)
		}
		return add(rd.cols-1, "last")
	}
	if len(rd.labels) == rd.cols {
		return fmt.Errorf("data: %s%w: every one of the %d columns is a label; want at least one feature", rd.where, ErrBadCSV, rd.cols)
	}
	return nil
}

// row reads one example.
func (rd *csvReader) row(cr *csv.Reader, rec []string) error {
	if len(rd.xs)+len(rec) > MaxCSVValues {
		return fmt.Errorf("data: %s%w: more than %d values", rd.where, ErrBadCSV, MaxCSVValues)
	}
	for c, v := range rec {
		if rd.isLab[c] {
			continue
		}
		line, _ := cr.FieldPos(c)
		f, err := rd.float(line, c, v, "")
		if err != nil {
			return err
		}
		rd.xs = append(rd.xs, f)
	}
	for _, c := range rd.labels {
		line, _ := cr.FieldPos(c)
		v := rec[c]
		if rd.opts.Labels == tensor.Int32 {
			k, err := strconv.ParseInt(strings.TrimSpace(v), 10, 32)
			if err != nil || k < 0 {
				return rd.bad(line, c, "label %q is not a class index", v)
			}
			rd.ys32 = append(rd.ys32, int32(k))
			continue
		}
		f, err := rd.float(line, c, v, "label ")
		if err != nil {
			return err
		}
		rd.ysF = append(rd.ysF, f)
	}
	rd.rows++
	return nil
}

// float parses a float32 value, refusing a non-finite one unless allowed.
func (rd *csvReader) float(line, c int, v, what string) (float32, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 32)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, rd.bad(line, c, "%s%q is not a number", what, v)
	}
	if !rd.opts.AllowNonFinite && (math.IsNaN(f) || math.IsInf(f, 0)) {
		reason := "is not a finite number"
		if errors.Is(err, strconv.ErrRange) {
			reason = "is beyond float32's range"
		}
		return 0, rd.bad(line, c, "%s%q %s (CSVOptions.AllowNonFinite accepts NaN and infinities)", what, v, reason)
	}
	return float32(f), nil
}

// quoteList formats names as "a", "b", "c".
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
