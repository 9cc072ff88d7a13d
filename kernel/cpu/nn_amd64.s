//go:build !purego

#include "textflag.h"

// Vectorised float32 loops of nn.go, eight lanes at a time. Each performs
// the scalar loop's operations in its order and rounding (no fused
// multiply-adds), so that both give bit-identical results.

DATA nnExpConst<>+0(SB)/4, $0x42b0999a  // 88.3: exp overflows above
DATA nnExpConst<>+4(SB)/4, $0xc2ae999a  // -87.3: exp is 0 below
DATA nnExpConst<>+8(SB)/4, $0x3fb8aa3b  // log2(e)
DATA nnExpConst<>+12(SB)/4, $0x4b400000 // 1.5*2^23: rounds to an integer
DATA nnExpConst<>+16(SB)/4, $0x3f318000 // ln2 high: 0.693359375
DATA nnExpConst<>+20(SB)/4, $0xb95e8083 // ln2 low: -2.12194440e-4
DATA nnExpConst<>+24(SB)/4, $0x39506967 // 1.9875691500e-4
DATA nnExpConst<>+28(SB)/4, $0x3ab743ce // 1.3981999507e-3
DATA nnExpConst<>+32(SB)/4, $0x3c088908 // 8.3334519073e-3
DATA nnExpConst<>+36(SB)/4, $0x3d2aa9c1 // 4.1665795894e-2
DATA nnExpConst<>+40(SB)/4, $0x3e2aaaaa // 1.6666665459e-1
DATA nnExpConst<>+44(SB)/4, $0x3f000000 // 5.0000001201e-1
DATA nnExpConst<>+48(SB)/4, $0x3f800000 // 1
DATA nnExpConst<>+52(SB)/4, $0x0000007f // exponent bias 127
DATA nnExpConst<>+56(SB)/4, $0x80000000 // sign bit
DATA nnExpConst<>+60(SB)/4, $0x7f800000 // +Inf
GLOBL nnExpConst<>(SB), RODATA|NOPTR, $64

// func nnSigmoidAVX2(x, y *float32, n int)
//
// y[i] = 1 / (1 + nnExp32(-x[i])) for n (a multiple of 8) elements.
TEXT ·nnSigmoidAVX2(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	MOVQ         y+8(FP), DI
	MOVQ         n+16(FP), CX
	SHRQ         $3, CX
	JZ           sigdone
	VBROADCASTSS nnExpConst<>+0(SB), Y15  // hi
	VBROADCASTSS nnExpConst<>+4(SB), Y14  // lo
	VBROADCASTSS nnExpConst<>+8(SB), Y13  // log2e
	VBROADCASTSS nnExpConst<>+12(SB), Y12 // round
	VBROADCASTSS nnExpConst<>+16(SB), Y11 // ln2 high
	VBROADCASTSS nnExpConst<>+20(SB), Y10 // ln2 low
	VBROADCASTSS nnExpConst<>+48(SB), Y9  // 1
	VBROADCASTSS nnExpConst<>+56(SB), Y8  // sign

sigloop:
	VMOVUPS (SI), Y0
	VXORPS  Y8, Y0, Y1     // t = -x
	VCMPPS  $0x1e, Y15, Y1, Y7 // big = t > 88.3 (exp = +Inf, y = 0)
	VMAXPS  Y14, Y1, Y2    // clamp below: exp(-87.3) adds nothing to 1
	VMINPS  Y15, Y2, Y2    // clamp above (masked off by big)
	VMULPS  Y13, Y2, Y3    // n = t*log2e + round - round
	VADDPS  Y12, Y3, Y3
	VSUBPS  Y12, Y3, Y3
	VMULPS  Y11, Y3, Y4    // r = t - n*ln2hi - n*ln2lo
	VSUBPS  Y4, Y2, Y2
	VMULPS  Y10, Y3, Y4
	VSUBPS  Y4, Y2, Y2
	VBROADCASTSS nnExpConst<>+24(SB), Y4 // p = polynomial in r
	VMULPS  Y2, Y4, Y4
	VBROADCASTSS nnExpConst<>+28(SB), Y5
	VADDPS  Y5, Y4, Y4
	VMULPS  Y2, Y4, Y4
	VBROADCASTSS nnExpConst<>+32(SB), Y5
	VADDPS  Y5, Y4, Y4
	VMULPS  Y2, Y4, Y4
	VBROADCASTSS nnExpConst<>+36(SB), Y5
	VADDPS  Y5, Y4, Y4
	VMULPS  Y2, Y4, Y4
	VBROADCASTSS nnExpConst<>+40(SB), Y5
	VADDPS  Y5, Y4, Y4
	VMULPS  Y2, Y4, Y4
	VBROADCASTSS nnExpConst<>+44(SB), Y5
	VADDPS  Y5, Y4, Y4
	VMULPS  Y2, Y2, Y5     // z = r*r
	VMULPS  Y5, Y4, Y4     // e = p*z + r + 1
	VADDPS  Y2, Y4, Y4
	VADDPS  Y9, Y4, Y4
	VCVTTPS2DQ Y3, Y3      // 2^n in the exponent bits
	VPBROADCASTD nnExpConst<>+52(SB), Y5
	VPADDD  Y5, Y3, Y3
	VPSLLD  $23, Y3, Y3
	VMULPS  Y3, Y4, Y4     // exp(t)
	VADDPS  Y9, Y4, Y4     // y = 1 / (1 + exp(t))
	VDIVPS  Y4, Y9, Y4
	VANDNPS Y4, Y7, Y4     // y = 0 where exp(t) overflows
	VCMPPS  $3, Y0, Y0, Y6 // NaN in, NaN out
	VBLENDVPS Y6, Y0, Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     sigloop

sigdone:
	VZEROUPPER
	RET

// func nnSigmoidGradAVX(y, dy, dx *float32, n int)
//
// dx[i] = dy[i] * y[i] * (1 - y[i]) for n (a multiple of 8) elements.
TEXT ·nnSigmoidGradAVX(SB), NOSPLIT, $0-32
	MOVQ         y+0(FP), SI
	MOVQ         dy+8(FP), DX
	MOVQ         dx+16(FP), DI
	MOVQ         n+24(FP), CX
	SHRQ         $3, CX
	JZ           sgdone
	VBROADCASTSS nnExpConst<>+48(SB), Y9

sgloop:
	VMOVUPS (SI), Y0
	VMOVUPS (DX), Y1
	VMULPS  Y0, Y1, Y1 // dy*y
	VSUBPS  Y0, Y9, Y2 // 1-y
	VMULPS  Y2, Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	DECQ    CX
	JNZ     sgloop

sgdone:
	VZEROUPPER
	RET

// func nnAddAVX(a, b, y *float32, n int)
//
// y[i] = a[i] + b[i] for n (a multiple of 8) elements.
TEXT ·nnAddAVX(SB), NOSPLIT, $0-32
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DX
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ   adddone

addloop:
	VMOVUPS (SI), Y0
	VADDPS  (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	DECQ    CX
	JNZ     addloop

adddone:
	VZEROUPPER
	RET

// func nnSubScaledAVX(v, grad *float32, n int, alpha float32)
//
// v[i] -= alpha * grad[i] for n (a multiple of 8) elements: the gradient
// descent update, rounded like the scalar loop (product, then difference).
TEXT ·nnSubScaledAVX(SB), NOSPLIT, $0-28
	MOVQ         v+0(FP), DI
	MOVQ         grad+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS alpha+24(FP), Y9
	SHRQ         $3, CX
	JZ           ssdone

ssloop:
	VMULPS  (SI), Y9, Y0
	VMOVUPS (DI), Y1
	VSUBPS  Y0, Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     ssloop

ssdone:
	VZEROUPPER
	RET

// func nnExpAVX2(x, y *float32, n int)
//
// y[i] = nnExp32(x[i]) for n (a multiple of 8) elements.
TEXT ·nnExpAVX2(SB), NOSPLIT, $0-24
	MOVQ         x+0(FP), SI
	MOVQ         y+8(FP), DI
	MOVQ         n+16(FP), CX
	SHRQ         $3, CX
	JZ           expdone
	VBROADCASTSS nnExpConst<>+0(SB), Y15  // hi
	VBROADCASTSS nnExpConst<>+4(SB), Y14  // lo
	VBROADCASTSS nnExpConst<>+8(SB), Y13  // log2e
	VBROADCASTSS nnExpConst<>+12(SB), Y12 // round
	VBROADCASTSS nnExpConst<>+16(SB), Y11 // ln2 high
	VBROADCASTSS nnExpConst<>+20(SB), Y10 // ln2 low
	VBROADCASTSS nnExpConst<>+48(SB), Y9  // 1
	VBROADCASTSS nnExpConst<>+60(SB), Y8  // +Inf

exploop:
	VMOVUPS (SI), Y0
	VCMPPS  $0x1e, Y15, Y0, Y7 // big = x > 88.3: +Inf
	VCMPPS  $0x11, Y14, Y0, Y6 // small = x < -87.3: 0
	VMAXPS  Y14, Y0, Y2        // clamp into the computed range
	VMINPS  Y15, Y2, Y2
	VMULPS  Y13, Y2, Y3        // n = x*log2e + round - round
	VADDPS  Y12, Y3, Y3
	VSUBPS  Y12, Y3, Y3
	VMULPS  Y11, Y3, Y4        // r = x - n*ln2hi - n*ln2lo
	VSUBPS  Y4, Y2, Y2
	VMULPS  Y10, Y3, Y4
	VSUBPS  Y4, Y2, Y2
	VBROADCASTSS nnExpConst<>+24(SB), Y4 // p = polynomial in r
	VMULPS  Y2, Y4, Y4
	VBROADCASTSS nnExpConst<>+28(SB), Y5
	VADDPS  Y5, Y4, Y4
	VMULPS  Y2, Y4, Y4
	VBROADCASTSS nnExpConst<>+32(SB), Y5
	VADDPS  Y5, Y4, Y4
	VMULPS  Y2, Y4, Y4
	VBROADCASTSS nnExpConst<>+36(SB), Y5
	VADDPS  Y5, Y4, Y4
	VMULPS  Y2, Y4, Y4
	VBROADCASTSS nnExpConst<>+40(SB), Y5
	VADDPS  Y5, Y4, Y4
	VMULPS  Y2, Y4, Y4
	VBROADCASTSS nnExpConst<>+44(SB), Y5
	VADDPS  Y5, Y4, Y4
	VMULPS  Y2, Y2, Y5         // z = r*r
	VMULPS  Y5, Y4, Y4         // e = p*z + r + 1
	VADDPS  Y2, Y4, Y4
	VADDPS  Y9, Y4, Y4
	VCVTTPS2DQ Y3, Y3          // 2^n in the exponent bits
	VPBROADCASTD nnExpConst<>+52(SB), Y5
	VPADDD  Y5, Y3, Y3
	VPSLLD  $23, Y3, Y3
	VMULPS  Y3, Y4, Y4         // exp(x)
	VANDNPS Y4, Y6, Y4         // 0 below the range
	VBLENDVPS Y7, Y8, Y4, Y4   // +Inf above it
	VCMPPS  $3, Y0, Y0, Y6     // NaN in, NaN out
	VBLENDVPS Y6, Y0, Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     exploop

expdone:
	VZEROUPPER
	RET

// func nnColSums16AVX(dy *float32, stride, rows int, db *float32)
//
// db[c] = float32(sum over r < rows of float64(dy[r*stride+c])) for the 16
// columns c < 16, summed in row order in float64 as nnBiasGradCols does.
TEXT ·nnColSums16AVX(SB), NOSPLIT, $0-32
	MOVQ   dy+0(FP), SI
	MOVQ   stride+8(FP), DX
	SHLQ   $2, DX
	MOVQ   rows+16(FP), CX
	MOVQ   db+24(FP), DI
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	TESTQ  CX, CX
	JZ     csstore

csloop:
	VCVTPS2PD (SI), Y4
	VADDPD    Y4, Y0, Y0
	VCVTPS2PD 16(SI), Y5
	VADDPD    Y5, Y1, Y1
	VCVTPS2PD 32(SI), Y6
	VADDPD    Y6, Y2, Y2
	VCVTPS2PD 48(SI), Y7
	VADDPD    Y7, Y3, Y3
	ADDQ      DX, SI
	DECQ      CX
	JNZ       csloop

csstore:
	VCVTPD2PSY Y0, X0
	VMOVUPS    X0, (DI)
	VCVTPD2PSY Y1, X1
	VMOVUPS    X1, 16(DI)
	VCVTPD2PSY Y2, X2
	VMOVUPS    X2, 32(DI)
	VCVTPD2PSY Y3, X3
	VMOVUPS    X3, 48(DI)
	VZEROUPPER
	RET

// func nnReluAVX(x, y *float32, n int)
//
// y[i] = x[i] if !(x[i] <= 0), else +0, for n (a multiple of 8) elements:
// Go's max(x, 0), NaN kept and -0 made +0, as a mask instead of a branch
// that mispredicts on every other activation.
TEXT ·nnReluAVX(SB), NOSPLIT, $0-24
	MOVQ   x+0(FP), SI
	MOVQ   y+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y9, Y9, Y9
	SHRQ   $3, CX
	JZ     reludone

reluloop:
	VMOVUPS (SI), Y0
	VCMPPS  $6, Y9, Y0, Y1 // not less or equal (unordered true)
	VANDPS  Y0, Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     reluloop

reludone:
	VZEROUPPER
	RET

// func nnReluGradAVX(dy, y, dx *float32, n int)
//
// dx[i] = dy[i] if !(y[i] <= 0), else +0, for n (a multiple of 8) elements.
TEXT ·nnReluGradAVX(SB), NOSPLIT, $0-32
	MOVQ   dy+0(FP), SI
	MOVQ   y+8(FP), DX
	MOVQ   dx+16(FP), DI
	MOVQ   n+24(FP), CX
	VXORPS Y9, Y9, Y9
	SHRQ   $3, CX
	JZ     rgdone

rgloop:
	VMOVUPS (DX), Y0
	VCMPPS  $6, Y9, Y0, Y1
	VANDPS  (SI), Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	DECQ    CX
	JNZ     rgloop

rgdone:
	VZEROUPPER
	RET
