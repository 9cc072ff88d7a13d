package data

import (
	"bufio"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/distflow/distflow/tensor"
)

// ReadCriteo reads click examples in the Criteo display-advertising TSV
// format (train.txt of the Kaggle challenge, the days of the 1TB logs):
// one example a line, tab-separated: the 0/1 label, 13 integer features,
// 26 categorical features as hexadecimal strings; any feature may be
// empty. Integers become log(1 + max(x, 0)) (0 when missing); each
// categorical value is hashed (FNV-1a) into vocab buckets of its
// feature's block. It reads at most limit examples (all if limit <= 0).
// name labels errors ("train.txt:12: ...").
func ReadCriteo(r io.Reader, name string, vocab, limit int) (*ClickLog, error) {
	if vocab < 1 || vocab > math.MaxInt64/CategoricalFeatures {
		return nil, fmt.Errorf("data: ReadCriteo: vocabulary %d: want 1 to %d", vocab, math.MaxInt64/CategoricalFeatures)
	}
	var cat []int64
	var dense []float32
	var labels []float32
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() && (limit <= 0 || len(labels) < limit) {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		if text == "" {
			continue
		}
		fields := strings.Split(text, "\t")
		if len(fields) != 1+DenseFeatures+CategoricalFeatures {
			return nil, fmt.Errorf("data: %s:%d: %d tab-separated fields, want %d (label, 13 integers, 26 categories)",
				name, line, len(fields), 1+DenseFeatures+CategoricalFeatures)
		}
		switch fields[0] {
		case "0":
			labels = append(labels, 0)
		case "1":
			labels = append(labels, 1)
		default:
			return nil, fmt.Errorf("data: %s:%d: label %q, want 0 or 1", name, line, fields[0])
		}
		for j, f := range fields[1 : 1+DenseFeatures] {
			v := 0.0
			if f != "" {
				x, err := strconv.ParseFloat(f, 64)
				if err == nil && (math.IsNaN(x) || math.IsInf(x, 0)) {
					err = errors.New("not finite")
				}
				if err != nil {
					return nil, fmt.Errorf("data: %s:%d: integer feature %d: %q is not a number", name, line, j+1, f)
				}
				v = math.Log1p(max(x, 0))
			}
			dense = append(dense, float32(v))
		}
		for f, s := range fields[1+DenseFeatures:] {
			h := fnv.New64a()
			h.Write([]byte(s))
			cat = append(cat, int64(f*vocab)+int64(h.Sum64()%uint64(vocab)))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("data: %s: after line %d: %w", name, line, err)
	}
	n := len(labels)
	if n == 0 {
		return nil, fmt.Errorf("data: %s: no examples", name)
	}
	return &ClickLog{
		Cat:    tensor.MustFromSlice(cat, n, CategoricalFeatures),
		Dense:  tensor.MustFromSlice(dense, n, DenseFeatures),
		Labels: tensor.MustFromSlice(labels, n),
		Vocab:  vocab,
	}, nil
}

// LoadCriteoDir reads the Criteo TSV files of dir (*.txt and *.tsv, in
// name order) with ReadCriteo, at most limit examples in all.
func LoadCriteoDir(dir string, vocab, limit int) (*ClickLog, error) {
	var files []string
	for _, pat := range []string{"*.txt", "*.tsv"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, err
		}
		files = append(files, m...)
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("data: %s has no Criteo TSV files (*.txt, *.tsv)", dir)
	}
	var parts []*ClickLog
	total := 0
	for _, name := range files {
		if limit > 0 && total >= limit {
			break
		}
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		l, err := ReadCriteo(f, name, vocab, limit-total)
		f.Close()
		if err != nil {
			return nil, err
		}
		parts = append(parts, l)
		total += l.Len()
	}
	return concatLogs(parts)
}

func concatLogs(parts []*ClickLog) (*ClickLog, error) {
	if len(parts) == 0 {
		return nil, errors.New("data: no click examples")
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	var cat []int64
	var dense, labels []float32
	for _, p := range parts {
		cat = append(cat, p.Cat.Int64s()...)
		dense = append(dense, p.Dense.Float32s()...)
		labels = append(labels, p.Labels.Float32s()...)
	}
	n := len(labels)
	return &ClickLog{Cat: tensor.MustFromSlice(cat, n, CategoricalFeatures), Dense: tensor.MustFromSlice(dense, n, DenseFeatures),
		Labels: tensor.MustFromSlice(labels, n), Vocab: parts[0].Vocab}, nil
}
