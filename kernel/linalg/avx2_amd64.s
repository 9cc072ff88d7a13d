//go:build !purego

#include "textflag.h"

// One k step of the 6x16 tile: two 8-wide loads of packed B (Y0, Y1), six
// broadcasts of packed A, twelve FMAs into the accumulators Y4..Y15
// (row r in Y(4+2r), Y(5+2r)). Offsets are relative to SI (A) and DI (B).
#define STEP(aoff, boff) \
	VMOVUPS      boff(DI), Y0;      \
	VMOVUPS      (boff+32)(DI), Y1; \
	VBROADCASTSS (aoff)(SI), Y2;    \
	VBROADCASTSS (aoff+4)(SI), Y3;  \
	VFMADD231PS  Y0, Y2, Y4;        \
	VFMADD231PS  Y1, Y2, Y5;        \
	VFMADD231PS  Y0, Y3, Y6;        \
	VFMADD231PS  Y1, Y3, Y7;        \
	VBROADCASTSS (aoff+8)(SI), Y2;  \
	VBROADCASTSS (aoff+12)(SI), Y3; \
	VFMADD231PS  Y0, Y2, Y8;        \
	VFMADD231PS  Y1, Y2, Y9;        \
	VFMADD231PS  Y0, Y3, Y10;       \
	VFMADD231PS  Y1, Y3, Y11;       \
	VBROADCASTSS (aoff+16)(SI), Y2; \
	VBROADCASTSS (aoff+20)(SI), Y3; \
	VFMADD231PS  Y0, Y2, Y12;       \
	VFMADD231PS  Y1, Y2, Y13;       \
	VFMADD231PS  Y0, Y3, Y14;       \
	VFMADD231PS  Y1, Y3, Y15

// Row r of C = accumulators (+ beta*C when Y3 holds broadcast beta).
#define STOREROW(lo, hi) \
	VMOVUPS lo, (DX);   \
	VMOVUPS hi, 32(DX); \
	ADDQ    R8, DX

#define STOREROWBETA(lo, hi) \
	VFMADD231PS (DX), Y3, lo;   \
	VFMADD231PS 32(DX), Y3, hi; \
	VMOVUPS     lo, (DX);       \
	VMOVUPS     hi, 32(DX);     \
	ADDQ        R8, DX

// func sgemm6x16(kc int, a *float32, b *float32, c *float32, ldc int, beta float32)
TEXT ·sgemm6x16(SB), NOSPLIT, $0-44
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8

	// Touch the six C rows early so their lines arrive during the k loop.
	MOVQ       DX, R9
	PREFETCHT0 (R9)
	PREFETCHT0 60(R9)
	ADDQ       R8, R9
	PREFETCHT0 (R9)
	PREFETCHT0 60(R9)
	ADDQ       R8, R9
	PREFETCHT0 (R9)
	PREFETCHT0 60(R9)
	ADDQ       R8, R9
	PREFETCHT0 (R9)
	PREFETCHT0 60(R9)
	ADDQ       R8, R9
	PREFETCHT0 (R9)
	PREFETCHT0 60(R9)
	ADDQ       R8, R9
	PREFETCHT0 (R9)
	PREFETCHT0 60(R9)

	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15

	MOVQ CX, R10
	SHRQ $2, R10
	JZ   tail

loop4:
	// Unrolled by 4: 24 floats of A and 64 of B per iteration.
	PREFETCHT0 384(SI)
	STEP(0, 0)
	STEP(24, 64)
	PREFETCHT0 576(DI)
	STEP(48, 128)
	STEP(72, 192)
	ADDQ $96, SI
	ADDQ $256, DI
	DECQ R10
	JNZ  loop4

tail:
	ANDQ $3, CX
	JZ   store

loop1:
	STEP(0, 0)
	ADDQ $24, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  loop1

store:
	// beta == +0 or -0: overwrite C without reading it (NaNs must not leak).
	MOVL  beta+40(FP), AX
	TESTL $0x7fffffff, AX
	JNZ   withbeta
	STOREROW(Y4, Y5)
	STOREROW(Y6, Y7)
	STOREROW(Y8, Y9)
	STOREROW(Y10, Y11)
	STOREROW(Y12, Y13)
	STOREROW(Y14, Y15)
	VZEROUPPER
	RET

withbeta:
	VBROADCASTSS beta+40(FP), Y3
	STOREROWBETA(Y4, Y5)
	STOREROWBETA(Y6, Y7)
	STOREROWBETA(Y8, Y9)
	STOREROWBETA(Y10, Y11)
	STOREROWBETA(Y12, Y13)
	STOREROWBETA(Y14, Y15)
	VZEROUPPER
	RET

// One k step of the 6x16 tile reading A in place: row r of the sliver is
// at SI + r*R9 (rows 0-2) and R11 + (r-3)*R9 (rows 3-5), and both pointers
// advance by the column stride R12 after the step. B is packed as above.
#define STEPDA(boff) \
	VMOVUPS      boff(DI), Y0;         \
	VMOVUPS      (boff+32)(DI), Y1;    \
	VBROADCASTSS (SI), Y2;             \
	VBROADCASTSS (SI)(R9*1), Y3;       \
	VFMADD231PS  Y0, Y2, Y4;           \
	VFMADD231PS  Y1, Y2, Y5;           \
	VFMADD231PS  Y0, Y3, Y6;           \
	VFMADD231PS  Y1, Y3, Y7;           \
	VBROADCASTSS (SI)(R9*2), Y2;       \
	VBROADCASTSS (R11), Y3;            \
	VFMADD231PS  Y0, Y2, Y8;           \
	VFMADD231PS  Y1, Y2, Y9;           \
	VFMADD231PS  Y0, Y3, Y10;          \
	VFMADD231PS  Y1, Y3, Y11;          \
	VBROADCASTSS (R11)(R9*1), Y2;      \
	VBROADCASTSS (R11)(R9*2), Y3;      \
	VFMADD231PS  Y0, Y2, Y12;          \
	VFMADD231PS  Y1, Y2, Y13;          \
	VFMADD231PS  Y0, Y3, Y14;          \
	VFMADD231PS  Y1, Y3, Y15;          \
	ADDQ         R12, SI;              \
	ADDQ         R12, R11

// func sgemm6x16da(kc int, a *float32, rsa, csa int, b *float32, c *float32, ldc int, beta float32)
//
// sgemm6x16 with A read where it lies, unpacked: element (r, l) of the 6 x kc
// sliver is a[r*rsa + l*csa]. rsa=lda, csa=1 reads a row-major A; rsa=1,
// csa=lda a transposed one. Only alpha == 1 can take this path.
TEXT ·sgemm6x16da(SB), NOSPLIT, $0-60
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ rsa+16(FP), R9
	SHLQ $2, R9
	MOVQ csa+24(FP), R12
	SHLQ $2, R12
	MOVQ b+32(FP), DI
	MOVQ c+40(FP), DX
	MOVQ ldc+48(FP), R8
	SHLQ $2, R8
	LEAQ (SI)(R9*2), R11
	ADDQ R9, R11

	MOVQ       DX, R10
	PREFETCHT0 (R10)
	PREFETCHT0 60(R10)
	ADDQ       R8, R10
	PREFETCHT0 (R10)
	PREFETCHT0 60(R10)
	ADDQ       R8, R10
	PREFETCHT0 (R10)
	PREFETCHT0 60(R10)
	ADDQ       R8, R10
	PREFETCHT0 (R10)
	PREFETCHT0 60(R10)
	ADDQ       R8, R10
	PREFETCHT0 (R10)
	PREFETCHT0 60(R10)
	ADDQ       R8, R10
	PREFETCHT0 (R10)
	PREFETCHT0 60(R10)

	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15

	MOVQ CX, R10
	SHRQ $2, R10
	JZ   datail

daloop4:
	PREFETCHT0 576(DI)
	STEPDA(0)
	STEPDA(64)
	STEPDA(128)
	STEPDA(192)
	ADDQ $256, DI
	DECQ R10
	JNZ  daloop4

datail:
	ANDQ $3, CX
	JZ   dastore

daloop1:
	STEPDA(0)
	ADDQ $64, DI
	DECQ CX
	JNZ  daloop1

dastore:
	MOVL  beta+56(FP), AX
	TESTL $0x7fffffff, AX
	JNZ   dawithbeta
	STOREROW(Y4, Y5)
	STOREROW(Y6, Y7)
	STOREROW(Y8, Y9)
	STOREROW(Y10, Y11)
	STOREROW(Y12, Y13)
	STOREROW(Y14, Y15)
	VZEROUPPER
	RET

dawithbeta:
	VBROADCASTSS beta+56(FP), Y3
	STOREROWBETA(Y4, Y5)
	STOREROWBETA(Y6, Y7)
	STOREROWBETA(Y8, Y9)
	STOREROWBETA(Y10, Y11)
	STOREROWBETA(Y12, Y13)
	STOREROWBETA(Y14, Y15)
	VZEROUPPER
	RET

// The 6x8 tiles below serve the last column sliver of a product whose width
// leaves at most 8 columns there (the MLP's 100 = 6*16+4, the transposed
// fc1 input gradient's 50 = 3*16+2): half the work of a 6x16 tile. B is
// still packed 16 wide; only the first 8 values of each k step are read.
// The accumulators are Y4, Y6, ..., Y14 (row r in Y(4+2r)).
#define STEP8(aoff, boff) \
	VMOVUPS      boff(DI), Y0;      \
	VBROADCASTSS (aoff)(SI), Y2;    \
	VBROADCASTSS (aoff+4)(SI), Y3;  \
	VFMADD231PS  Y0, Y2, Y4;        \
	VFMADD231PS  Y0, Y3, Y6;        \
	VBROADCASTSS (aoff+8)(SI), Y2;  \
	VBROADCASTSS (aoff+12)(SI), Y3; \
	VFMADD231PS  Y0, Y2, Y8;        \
	VFMADD231PS  Y0, Y3, Y10;       \
	VBROADCASTSS (aoff+16)(SI), Y2; \
	VBROADCASTSS (aoff+20)(SI), Y3; \
	VFMADD231PS  Y0, Y2, Y12;       \
	VFMADD231PS  Y0, Y3, Y14

#define STOREROW8(r) \
	VMOVUPS r, (DX); \
	ADDQ    R8, DX

#define STOREROW8BETA(r) \
	VFMADD231PS (DX), Y3, r; \
	VMOVUPS     r, (DX);     \
	ADDQ        R8, DX

// func sgemm6x8(kc int, a *float32, b *float32, c *float32, ldc int, beta float32)
TEXT ·sgemm6x8(SB), NOSPLIT, $0-44
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8

	VXORPS Y4, Y4, Y4
	VXORPS Y6, Y6, Y6
	VXORPS Y8, Y8, Y8
	VXORPS Y10, Y10, Y10
	VXORPS Y12, Y12, Y12
	VXORPS Y14, Y14, Y14

	MOVQ CX, R10
	SHRQ $2, R10
	JZ   tail8

loop8:
	STEP8(0, 0)
	STEP8(24, 64)
	STEP8(48, 128)
	STEP8(72, 192)
	ADDQ $96, SI
	ADDQ $256, DI
	DECQ R10
	JNZ  loop8

tail8:
	ANDQ $3, CX
	JZ   store8

loop18:
	STEP8(0, 0)
	ADDQ $24, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  loop18

store8:
	MOVL  beta+40(FP), AX
	TESTL $0x7fffffff, AX
	JNZ   withbeta8
	STOREROW8(Y4)
	STOREROW8(Y6)
	STOREROW8(Y8)
	STOREROW8(Y10)
	STOREROW8(Y12)
	STOREROW8(Y14)
	VZEROUPPER
	RET

withbeta8:
	VBROADCASTSS beta+40(FP), Y3
	STOREROW8BETA(Y4)
	STOREROW8BETA(Y6)
	STOREROW8BETA(Y8)
	STOREROW8BETA(Y10)
	STOREROW8BETA(Y12)
	STOREROW8BETA(Y14)
	VZEROUPPER
	RET

#define STEP8DA(boff) \
	VMOVUPS      boff(DI), Y0;    \
	VBROADCASTSS (SI), Y2;        \
	VBROADCASTSS (SI)(R9*1), Y3;  \
	VFMADD231PS  Y0, Y2, Y4;      \
	VFMADD231PS  Y0, Y3, Y6;      \
	VBROADCASTSS (SI)(R9*2), Y2;  \
	VBROADCASTSS (R11), Y3;       \
	VFMADD231PS  Y0, Y2, Y8;      \
	VFMADD231PS  Y0, Y3, Y10;     \
	VBROADCASTSS (R11)(R9*1), Y2; \
	VBROADCASTSS (R11)(R9*2), Y3; \
	VFMADD231PS  Y0, Y2, Y12;     \
	VFMADD231PS  Y0, Y3, Y14;     \
	ADDQ         R12, SI;         \
	ADDQ         R12, R11

// func sgemm6x8da(kc int, a *float32, rsa, csa int, b *float32, c *float32, ldc int, beta float32)
TEXT ·sgemm6x8da(SB), NOSPLIT, $0-60
	MOVQ kc+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ rsa+16(FP), R9
	SHLQ $2, R9
	MOVQ csa+24(FP), R12
	SHLQ $2, R12
	MOVQ b+32(FP), DI
	MOVQ c+40(FP), DX
	MOVQ ldc+48(FP), R8
	SHLQ $2, R8
	LEAQ (SI)(R9*2), R11
	ADDQ R9, R11

	VXORPS Y4, Y4, Y4
	VXORPS Y6, Y6, Y6
	VXORPS Y8, Y8, Y8
	VXORPS Y10, Y10, Y10
	VXORPS Y12, Y12, Y12
	VXORPS Y14, Y14, Y14

	MOVQ CX, R10
	SHRQ $2, R10
	JZ   datail8

daloop8:
	STEP8DA(0)
	STEP8DA(64)
	STEP8DA(128)
	STEP8DA(192)
	ADDQ $256, DI
	DECQ R10
	JNZ  daloop8

datail8:
	ANDQ $3, CX
	JZ   dastore8

daloop18:
	STEP8DA(0)
	ADDQ $64, DI
	DECQ CX
	JNZ  daloop18

dastore8:
	MOVL  beta+56(FP), AX
	TESTL $0x7fffffff, AX
	JNZ   dawithbeta8
	STOREROW8(Y4)
	STOREROW8(Y6)
	STOREROW8(Y8)
	STOREROW8(Y10)
	STOREROW8(Y12)
	STOREROW8(Y14)
	VZEROUPPER
	RET

dawithbeta8:
	VBROADCASTSS beta+56(FP), Y3
	STOREROW8BETA(Y4)
	STOREROW8BETA(Y6)
	STOREROW8BETA(Y8)
	STOREROW8BETA(Y10)
	STOREROW8BETA(Y12)
	STOREROW8BETA(Y14)
	VZEROUPPER
	RET
