//go:build !purego

package linalg

func init() { CvtBF16 = cvtBF16 }
