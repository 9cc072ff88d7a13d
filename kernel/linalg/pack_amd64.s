//go:build !purego

#include "textflag.h"

// func packRowsAVX(src *float32, ldb, kb, slivers, nr int, dst *float32, ahead int)
//
// For each of kb rows of src (row stride ldb), copies slivers runs of nr
// values (nr a multiple of 16) to dst, run s of row l at dst + s*kb*nr +
// l*nr, and prefetches the same columns ahead bytes further on (rows to
// come; prefetches never fault, so they may point past the end of src).
TEXT ·packRowsAVX(SB), NOSPLIT, $0-56
	MOVQ src+0(FP), SI
	MOVQ ldb+8(FP), R8
	SHLQ $2, R8
	MOVQ kb+16(FP), CX
	MOVQ slivers+24(FP), R9
	MOVQ nr+32(FP), R10
	SHLQ $2, R10
	MOVQ dst+40(FP), DI
	MOVQ CX, R11
	IMULQ R10, R11
	SUBQ R10, R11
	MOVQ ahead+48(FP), R12

row:
	MOVQ SI, AX
	MOVQ DI, BX
	MOVQ R9, DX

sliver:
	MOVQ R10, R14

chunk:
	PREFETCHT0 (AX)(R12*1)
	VMOVUPS    (AX), Y0
	VMOVUPS    32(AX), Y1
	VMOVUPS    Y0, (BX)
	VMOVUPS    Y1, 32(BX)
	ADDQ       $64, AX
	ADDQ       $64, BX
	SUBQ       $64, R14
	JNZ        chunk
	ADDQ       R11, BX
	DECQ       DX
	JNZ        sliver

	ADDQ R8, SI
	ADDQ R10, DI
	DECQ CX
	JNZ  row
	VZEROUPPER
	RET
