//go:build !purego

#include "textflag.h"

// One k step of the 6x16 convolution tile: row r of A is read at
// (row pointer r)+BX, B is packed as in sgemm6x16. The row pointers are SI,
// R9, R10, R11, R12, R13; the accumulators Y4..Y15 as in sgemm6x16.
#define STEPCONV \
	VMOVUPS      (DI), Y0;        \
	VMOVUPS      32(DI), Y1;      \
	VBROADCASTSS (SI)(BX*1), Y2;  \
	VBROADCASTSS (R9)(BX*1), Y3;  \
	VFMADD231PS  Y0, Y2, Y4;      \
	VFMADD231PS  Y1, Y2, Y5;      \
	VFMADD231PS  Y0, Y3, Y6;      \
	VFMADD231PS  Y1, Y3, Y7;      \
	VBROADCASTSS (R10)(BX*1), Y2; \
	VBROADCASTSS (R11)(BX*1), Y3; \
	VFMADD231PS  Y0, Y2, Y8;      \
	VFMADD231PS  Y1, Y2, Y9;      \
	VFMADD231PS  Y0, Y3, Y10;     \
	VFMADD231PS  Y1, Y3, Y11;     \
	VBROADCASTSS (R12)(BX*1), Y2; \
	VBROADCASTSS (R13)(BX*1), Y3; \
	VFMADD231PS  Y0, Y2, Y12;     \
	VFMADD231PS  Y1, Y2, Y13;     \
	VFMADD231PS  Y0, Y3, Y14;     \
	VFMADD231PS  Y1, Y3, Y15;     \
	ADDQ         R14, BX;         \
	ADDQ         $64, DI

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

// func sgemm6x16conv(a *float32, rows *[6]int, csa, seglen, nseg, segstride int, b *float32, c *float32, ldc int, beta float32)
//
// The 6x16 tile C = A*B + beta*C where A is gathered in place, as a
// convolution's patch matrix is: its k steps come in nseg segments of
// seglen, and element (r, s, l) of A is a[rows[r] + s*segstride + l*csa].
// B holds nseg*seglen packed rows of 16. seglen and nseg are at least 1.
TEXT ·sgemm6x16conv(SB), NOSPLIT, $0-76
	MOVQ a+0(FP), AX
	MOVQ rows+8(FP), BX
	MOVQ 0(BX), SI
	LEAQ (AX)(SI*4), SI
	MOVQ 8(BX), R9
	LEAQ (AX)(R9*4), R9
	MOVQ 16(BX), R10
	LEAQ (AX)(R10*4), R10
	MOVQ 24(BX), R11
	LEAQ (AX)(R11*4), R11
	MOVQ 32(BX), R12
	LEAQ (AX)(R12*4), R12
	MOVQ 40(BX), R13
	LEAQ (AX)(R13*4), R13
	MOVQ csa+16(FP), R14
	SHLQ $2, R14
	MOVQ segstride+40(FP), AX
	SHLQ $2, AX
	MOVQ nseg+32(FP), R8
	MOVQ b+48(FP), DI

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

seg:
	XORQ BX, BX
	MOVQ seglen+24(FP), CX
	SHRQ $1, CX
	JZ   segtail

loop2:
	STEPCONV
	STEPCONV
	DECQ CX
	JNZ  loop2

segtail:
	MOVQ seglen+24(FP), CX
	ANDQ $1, CX
	JZ   segend
	STEPCONV

segend:
	ADDQ AX, SI
	ADDQ AX, R9
	ADDQ AX, R10
	ADDQ AX, R11
	ADDQ AX, R12
	ADDQ AX, R13
	DECQ R8
	JNZ  seg

	MOVQ  c+56(FP), DX
	MOVQ  ldc+64(FP), R8
	SHLQ  $2, R8
	MOVL  beta+72(FP), AX
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
	VBROADCASTSS beta+72(FP), Y3
	STOREROWBETA(Y4, Y5)
	STOREROWBETA(Y6, Y7)
	STOREROWBETA(Y8, Y9)
	STOREROWBETA(Y10, Y11)
	STOREROWBETA(Y12, Y13)
	STOREROWBETA(Y14, Y15)
	VZEROUPPER
	RET
