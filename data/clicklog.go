package data

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/distflow/distflow/tensor"
)

// Click logs for the CTR workload: examples of 26 categorical
// and 13 dense features with a 0/1 click label, as in the Criteo display
// advertising data set.

// Criteo's feature counts.
const (
	CategoricalFeatures = 26
	DenseFeatures       = 13
)

// ClickLog is a set of click examples. Categorical ids are global rows of
// one embedding table: feature f's ids lie in [f*Vocab, (f+1)*Vocab).
type ClickLog struct {
	// Cat is int64 [n, 26]: each feature's id, offset into the feature's
	// block of rows.
	Cat *tensor.Tensor
	// Dense is float32 [n, 13], each feature scaled to about unit range.
	Dense *tensor.Tensor
	// Labels is float32 [n]: 1 for a click.
	Labels *tensor.Tensor
	// Vocab is the number of ids of each categorical feature.
	Vocab int
	// Planted holds, for a synthetic log, each example's click probability
	// under the model that generated it (nil for real data).
	Planted []float64
}

// Len is the number of examples.
func (l *ClickLog) Len() int { return l.Labels.Shape()[0] }

// Rows is the number of rows an embedding table of the log's ids needs.
func (l *ClickLog) Rows() int { return CategoricalFeatures * l.Vocab }

// Split returns the first n examples and the rest (sharing no memory with
// l).
func (l *ClickLog) Split(n int) (*ClickLog, *ClickLog, error) {
	if n < 0 || n > l.Len() {
		return nil, nil, fmt.Errorf("data: ClickLog.Split(%d) of %d examples", n, l.Len())
	}
	part := func(lo, hi int) *ClickLog {
		c := tensor.MustFromSlice(append([]int64(nil), l.Cat.Int64s()[lo*CategoricalFeatures:hi*CategoricalFeatures]...), hi-lo, CategoricalFeatures)
		d := tensor.MustFromSlice(append([]float32(nil), l.Dense.Float32s()[lo*DenseFeatures:hi*DenseFeatures]...), hi-lo, DenseFeatures)
		y := tensor.MustFromSlice(append([]float32(nil), l.Labels.Float32s()[lo:hi]...), hi-lo)
		out := &ClickLog{Cat: c, Dense: d, Labels: y, Vocab: l.Vocab}
		if l.Planted != nil {
			out.Planted = append([]float64(nil), l.Planted[lo:hi]...)
		}
		return out
	}
	return part(0, n), part(n, l.Len()), nil
}

// ClickLogConfig configures SyntheticClickLog. Zero fields take defaults.
type ClickLogConfig struct {
	// Examples to generate (default 100,000).
	Examples int
	// Vocab is the number of distinct ids per categorical feature (default
	// 1,000).
	Vocab int
	// Zipf is the exponent s > 1 of the ids' Zipf distribution (default
	// 1.1): a few ids are frequent, most are rare, as in ad logs.
	Zipf float64
	// Seed fixes the planted model (ModelSeed, default Seed) and the
	// examples: the same config gives the same log.
	Seed, ModelSeed int64
	// Interaction scales the planted model's pairwise term (default 0.1;
	// negative: none). The wide-and-deep model learns the per-id and dense
	// terms quickly and the pairwise one slowly, so this sets how far
	// below the planted AUC a short training run ends.
	Interaction float64
}

func (c ClickLogConfig) withDefaults() ClickLogConfig {
	if c.Examples == 0 {
		c.Examples = 100_000
	}
	if c.Vocab == 0 {
		c.Vocab = 1000
	}
	if c.Zipf == 0 {
		c.Zipf = 1.1
	}
	if c.ModelSeed == 0 {
		c.ModelSeed = c.Seed
	}
	switch {
	case c.Interaction == 0:
		c.Interaction = 0.1
	case c.Interaction < 0:
		c.Interaction = 0
	}
	return c
}

// plantedDim is the size of the planted model's embeddings.
const plantedDim = 4

// PlantedModel is the ground truth of a synthetic click log: a wide and
// deep logit
//
//	bias + sum_f w[id_f] + u.dense + v.tanh(dense) +
//	  Interaction * sum over the pairs (0,1), (2,3), ... of <e[id_f], e[id_f+1]>
//
// whose sigmoid is the click probability. The pairwise term is what a
// linear model cannot learn and embeddings can.
type PlantedModel struct {
	Vocab int
	Bias  float64
	W     []float64 // [26*vocab]
	E     []float64 // [26*vocab*plantedDim]
	U, V  []float64 // [13]
	// Interaction scales the pairwise term.
	Interaction float64
}

// NewPlantedModel draws the ground truth for vocab ids per feature.
func NewPlantedModel(vocab int, seed int64, interaction float64) *PlantedModel {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x706c616e746564)) // "planted"
	rows := CategoricalFeatures * vocab
	m := &PlantedModel{Vocab: vocab, Bias: -1.2, W: make([]float64, rows), E: make([]float64, rows*plantedDim),
		U: make([]float64, DenseFeatures), V: make([]float64, DenseFeatures), Interaction: interaction}
	for i := range m.W {
		m.W[i] = 0.35 * rng.NormFloat64()
	}
	for i := range m.E {
		m.E[i] = 0.5 * rng.NormFloat64()
	}
	for i := range m.U {
		m.U[i] = 0.3 * rng.NormFloat64()
		m.V[i] = 0.3 * rng.NormFloat64()
	}
	return m
}

// Logit is the planted logit of one example (cat: global ids, 26; dense: 13).
func (m *PlantedModel) Logit(cat []int64, dense []float32) float64 {
	z := m.Bias
	for _, id := range cat {
		z += m.W[id]
	}
	for f := 0; f+1 < len(cat); f += 2 {
		a, b := m.E[cat[f]*plantedDim:], m.E[cat[f+1]*plantedDim:]
		dot := 0.0
		for k := range plantedDim {
			dot += a[k] * b[k]
		}
		z += dot * m.Interaction
	}
	for j, x := range dense {
		z += m.U[j]*float64(x) + m.V[j]*math.Tanh(float64(x))
	}
	return z
}

// SyntheticClickLog generates a click log from a planted model: ids of
// each feature drawn from a Zipf distribution over a random permutation of
// its vocabulary, dense features from skewed distributions scaled like
// log(1+x), and labels drawn with the planted probability, recorded in
// Planted, so that the planted model's AUC on any subset is the best a
// model can expect.
func SyntheticClickLog(cfg ClickLogConfig) (*ClickLog, error) {
	cfg = cfg.withDefaults()
	switch {
	case cfg.Examples < 0:
		return nil, fmt.Errorf("data: SyntheticClickLog: %d examples", cfg.Examples)
	case cfg.Vocab < 1:
		return nil, fmt.Errorf("data: SyntheticClickLog: vocabulary %d: want at least 1", cfg.Vocab)
	case !(cfg.Zipf > 1):
		return nil, fmt.Errorf("data: SyntheticClickLog: Zipf exponent %v: want more than 1", cfg.Zipf)
	}
	m := NewPlantedModel(cfg.Vocab, cfg.ModelSeed, cfg.Interaction)
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x636c69636b6c6f67)) // "clicklog"
	// Each feature's popular ids are a different random subset.
	perm := make([][]int64, CategoricalFeatures)
	prng := rand.New(rand.NewPCG(uint64(cfg.ModelSeed), 0x7065726d)) // "perm"
	for f := range perm {
		perm[f] = make([]int64, cfg.Vocab)
		for i, p := range prng.Perm(cfg.Vocab) {
			perm[f][i] = int64(f*cfg.Vocab + p)
		}
	}
	zipf := rand.NewZipf(rng, cfg.Zipf, 1, uint64(cfg.Vocab-1))
	n := cfg.Examples
	cat := make([]int64, n*CategoricalFeatures)
	dense := make([]float32, n*DenseFeatures)
	labels := make([]float32, n)
	planted := make([]float64, n)
	for i := range n {
		c := cat[i*CategoricalFeatures : (i+1)*CategoricalFeatures]
		for f := range c {
			c[f] = perm[f][zipf.Uint64()]
		}
		d := dense[i*DenseFeatures : (i+1)*DenseFeatures]
		for j := range d {
			// Counts in Criteo are heavy-tailed; their log is about normal.
			d[j] = float32(math.Log1p(math.Exp(rng.NormFloat64()*1.2)) - 0.8)
		}
		p := 1 / (1 + math.Exp(-m.Logit(c, d)))
		planted[i] = p
		if rng.Float64() < p {
			labels[i] = 1
		}
	}
	return &ClickLog{
		Cat:     tensor.MustFromSlice(cat, n, CategoricalFeatures),
		Dense:   tensor.MustFromSlice(dense, n, DenseFeatures),
		Labels:  tensor.MustFromSlice(labels, n),
		Vocab:   cfg.Vocab,
		Planted: planted,
	}, nil
}

// AUC is the area under the ROC curve of scores for 0/1 labels: the
// probability that a random positive scores above a random negative (ties
// count one half). It is NaN unless both classes occur.
func AUC(scores []float64, labels []float32) float64 {
	n := min(len(scores), len(labels))
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return scores[idx[a]] < scores[idx[b]] })
	// Sum of the positives' ranks (1-based, ties averaged): Mann-Whitney U.
	var rankSum float64
	var pos, neg int
	for i := 0; i < n; {
		j := i
		for j < n && scores[idx[j]] == scores[idx[i]] {
			j++
		}
		rank := float64(i+j+1) / 2
		for k := i; k < j; k++ {
			if labels[idx[k]] > 0.5 {
				rankSum += rank
				pos++
			} else {
				neg++
			}
		}
		i = j
	}
	if pos == 0 || neg == 0 {
		return math.NaN()
	}
	return (rankSum - float64(pos)*float64(pos+1)/2) / (float64(pos) * float64(neg))
}

// LogLoss is the mean binary cross-entropy of probabilities p (clipped to
// [1e-7, 1-1e-7]) for 0/1 labels.
func LogLoss(p []float64, labels []float32) float64 {
	n := min(len(p), len(labels))
	if n == 0 {
		return math.NaN()
	}
	var sum float64
	for i := range n {
		q := min(max(p[i], 1e-7), 1-1e-7)
		if labels[i] > 0.5 {
			sum -= math.Log(q)
		} else {
			sum -= math.Log(1 - q)
		}
	}
	return sum / float64(n)
}
