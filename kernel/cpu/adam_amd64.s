//go:build !purego

#include "textflag.h"

// func adamAVX(v, m, vv, grad *float32, n int, lrT, c1, c2, eps float32)
//
// The Adam update of stateAdamRange on n (a multiple of 8) float32s, eight
// at a time, with the scalar loop's operations in its order and rounding
// (no fused multiply-adds), so that both give identical results.
TEXT ·adamAVX(SB), NOSPLIT, $0-56
	MOVQ         v+0(FP), DI
	MOVQ         m+8(FP), SI
	MOVQ         vv+16(FP), DX
	MOVQ         grad+24(FP), BX
	MOVQ         n+32(FP), CX
	SHRQ         $3, CX
	JZ           done
	VBROADCASTSS lrT+40(FP), Y8
	VBROADCASTSS c1+44(FP), Y9
	VBROADCASTSS c2+48(FP), Y10
	VBROADCASTSS eps+52(FP), Y11

loop:
	VMOVUPS (BX), Y0   // g
	VMOVUPS (SI), Y1   // m
	VSUBPS  Y1, Y0, Y2 // g - m
	VMULPS  Y9, Y2, Y2 // (g-m)*(1-beta1)
	VADDPS  Y2, Y1, Y1 // a = m + ...
	VMOVUPS Y1, (SI)
	VMULPS  Y0, Y0, Y3 // g*g
	VMOVUPS (DX), Y4   // vv
	VSUBPS  Y4, Y3, Y3 // g*g - vv
	VMULPS  Y10, Y3, Y3
	VADDPS  Y3, Y4, Y4 // b = vv + ...
	VMOVUPS Y4, (DX)
	VSQRTPS Y4, Y4
	VADDPS  Y11, Y4, Y4 // sqrt(b) + eps
	VMULPS  Y8, Y1, Y1  // lrT*a
	VDIVPS  Y4, Y1, Y1  // lrT*a / (sqrt(b)+eps)
	VMOVUPS (DI), Y5
	VSUBPS  Y1, Y5, Y5
	VMOVUPS Y5, (DI)
	ADDQ    $32, BX
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	DECQ    CX
	JNZ     loop

done:
	VZEROUPPER
	RET
