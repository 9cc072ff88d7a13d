package main

import (
	"github.com/spf13/pflag"

	"github.com/distflow/distflow/kernel/linalg"
)

// precisionFlag is --precision: the arithmetic of the matrix products of
// this process (linalg.SetPrecision), set as the flag is parsed. bf16 on a
// CPU without AVX512_BF16 (or with DISTFLOW_SIMD below avx512) is an error
// naming what is missing, not a silent float32 run. A local cluster passes
// the flag on to its tasks.
type precisionFlag struct{}

func (precisionFlag) String() string { return linalg.CurrentPrecision().String() }

func (precisionFlag) Type() string { return "string" }

func (precisionFlag) Set(s string) error {
	p, err := linalg.ParsePrecision(s)
	if err != nil {
		return err
	}
	return linalg.SetPrecision(p)
}

func addPrecisionFlag(fl *pflag.FlagSet) {
	fl.Var(precisionFlag{}, "precision", "arithmetic of the matrix products (the fully connected layers and their gradients): float32, or bf16 (operands rounded to bfloat16, float32 sums and weights; needs a CPU with AVX512_BF16)")
}
