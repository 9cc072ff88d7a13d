//go:build !purego

#include "textflag.h"

// The scans of state_finite.go. x*0 is ±0 for a finite x and NaN for a
// NaN or an infinity; the sum of those products is NaN when one is, and
// a NaN is the only value unordered with itself.

// func stateFiniteF32AVX(x *float32, n int) bool
//
// Reports whether the n (a multiple of 32) values at x are all finite.
TEXT ·stateFiniteF32AVX(SB), NOSPLIT, $0-17
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	VXORPS Y8, Y8, Y8 // zero
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	SHRQ   $5, CX
	JZ     f32done

f32loop:
	VMULPS (SI), Y8, Y4
	VMULPS 32(SI), Y8, Y5
	VMULPS 64(SI), Y8, Y6
	VMULPS 96(SI), Y8, Y7
	VADDPS Y4, Y0, Y0
	VADDPS Y5, Y1, Y1
	VADDPS Y6, Y2, Y2
	VADDPS Y7, Y3, Y3
	ADDQ   $128, SI
	DECQ   CX
	JNZ    f32loop

f32done:
	VADDPS       Y1, Y0, Y0
	VADDPS       Y3, Y2, Y2
	VADDPS       Y2, Y0, Y0
	VCMPPS       $3, Y0, Y0, Y0 // unordered: NaN lanes all ones
	VMOVMSKPS    Y0, AX
	TESTL        AX, AX
	SETEQ        ret+16(FP)
	VZEROUPPER
	RET

// func stateFiniteF64AVX(x *float64, n int) bool
//
// Reports whether the n (a multiple of 16) values at x are all finite.
TEXT ·stateFiniteF64AVX(SB), NOSPLIT, $0-17
	MOVQ   x+0(FP), SI
	MOVQ   n+8(FP), CX
	VXORPD Y8, Y8, Y8
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	SHRQ   $4, CX
	JZ     f64done

f64loop:
	VMULPD (SI), Y8, Y4
	VMULPD 32(SI), Y8, Y5
	VMULPD 64(SI), Y8, Y6
	VMULPD 96(SI), Y8, Y7
	VADDPD Y4, Y0, Y0
	VADDPD Y5, Y1, Y1
	VADDPD Y6, Y2, Y2
	VADDPD Y7, Y3, Y3
	ADDQ   $128, SI
	DECQ   CX
	JNZ    f64loop

f64done:
	VADDPD       Y1, Y0, Y0
	VADDPD       Y3, Y2, Y2
	VADDPD       Y2, Y0, Y0
	VCMPPD       $3, Y0, Y0, Y0
	VMOVMSKPD    Y0, AX
	TESTL        AX, AX
	SETEQ        ret+16(FP)
	VZEROUPPER
	RET

// func stateSubScaledFiniteAVX(v, grad *float32, n int, alpha float32) bool
//
// Reports whether v[i] - alpha*grad[i], rounded as nnSubScaledAVX rounds
// it, is finite for all n (a multiple of 16) elements; stores nothing.
TEXT ·stateSubScaledFiniteAVX(SB), NOSPLIT, $0-33
	MOVQ         v+0(FP), DI
	MOVQ         grad+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS alpha+24(FP), Y9
	VXORPS       Y8, Y8, Y8
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1
	SHRQ         $4, CX
	JZ           gddone

gdloop:
	VMULPS  (SI), Y9, Y2
	VMULPS  32(SI), Y9, Y3
	VMOVUPS (DI), Y4
	VMOVUPS 32(DI), Y5
	VSUBPS  Y2, Y4, Y4
	VSUBPS  Y3, Y5, Y5
	VMULPS  Y8, Y4, Y4
	VMULPS  Y8, Y5, Y5
	VADDPS  Y4, Y0, Y0
	VADDPS  Y5, Y1, Y1
	ADDQ    $64, SI
	ADDQ    $64, DI
	DECQ    CX
	JNZ     gdloop

gddone:
	VADDPS       Y1, Y0, Y0
	VCMPPS       $3, Y0, Y0, Y0
	VMOVMSKPS    Y0, AX
	TESTL        AX, AX
	SETEQ        ret+32(FP)
	VZEROUPPER
	RET

// func adamFiniteAVX(v, m, vv, grad *float32, n int, lrT, c1, c2, eps float32) bool
//
// Reports whether adamAVX's new m, vv and v, computed as it computes them,
// are finite for all n (a multiple of 8) elements; stores nothing.
TEXT ·adamFiniteAVX(SB), NOSPLIT, $0-57
	MOVQ         v+0(FP), DI
	MOVQ         m+8(FP), SI
	MOVQ         vv+16(FP), DX
	MOVQ         grad+24(FP), BX
	MOVQ         n+32(FP), CX
	VXORPS       Y12, Y12, Y12 // zero
	VXORPS       Y13, Y13, Y13 // sum of the results times zero
	SHRQ         $3, CX
	JZ           afdone
	VBROADCASTSS lrT+40(FP), Y8
	VBROADCASTSS c1+44(FP), Y9
	VBROADCASTSS c2+48(FP), Y10
	VBROADCASTSS eps+52(FP), Y11

afloop:
	VMOVUPS (BX), Y0
	VMOVUPS (SI), Y1
	VSUBPS  Y1, Y0, Y2
	VMULPS  Y9, Y2, Y2
	VADDPS  Y2, Y1, Y1  // new m
	VMULPS  Y12, Y1, Y6
	VADDPS  Y6, Y13, Y13
	VMULPS  Y0, Y0, Y3
	VMOVUPS (DX), Y4
	VSUBPS  Y4, Y3, Y3
	VMULPS  Y10, Y3, Y3
	VADDPS  Y3, Y4, Y4  // new vv
	VMULPS  Y12, Y4, Y6
	VADDPS  Y6, Y13, Y13
	VSQRTPS Y4, Y4
	VADDPS  Y11, Y4, Y4
	VMULPS  Y8, Y1, Y1
	VDIVPS  Y4, Y1, Y1
	VMOVUPS (DI), Y5
	VSUBPS  Y1, Y5, Y5  // new v
	VMULPS  Y12, Y5, Y6
	VADDPS  Y6, Y13, Y13
	ADDQ    $32, BX
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	DECQ    CX
	JNZ     afloop

afdone:
	VCMPPS       $3, Y13, Y13, Y13
	VMOVMSKPS    Y13, AX
	TESTL        AX, AX
	SETEQ        ret+56(FP)
	VZEROUPPER
	RET

// func stateMaxBitsAVX2(x *float32, n int, mask uint32) uint32
//
// Returns the largest of the bits of x[i] & mask, compared as unsigned
// integers, over n (a positive multiple of 8) elements: with mask
// 0x7fffffff the bits of the largest magnitude (finite values order as
// their bits do; an infinity or a NaN is above 0x7f7fffff), with mask
// 0xffffffff 0x80000000 or more when any element has its sign bit set.
TEXT ·stateMaxBitsAVX2(SB), NOSPLIT, $0-28
	MOVQ         x+0(FP), SI
	MOVQ         n+8(FP), CX
	MOVL         mask+16(FP), AX
	VMOVD        AX, X2
	VPBROADCASTD X2, Y2
	VPXOR        Y0, Y0, Y0
	VPXOR        Y1, Y1, Y1

mb16:
	CMPQ    CX, $16
	JB      mb8
	VPAND   (SI), Y2, Y3
	VPAND   32(SI), Y2, Y4
	VPMAXUD Y3, Y0, Y0
	VPMAXUD Y4, Y1, Y1
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     mb16

mb8:
	CMPQ    CX, $8
	JB      mbdone
	VPAND   (SI), Y2, Y3
	VPMAXUD Y3, Y0, Y0
	ADDQ    $32, SI
	SUBQ    $8, CX
	JMP     mb8

mbdone:
	VPMAXUD      Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPMAXUD      X1, X0, X0
	VPSHUFD      $0x4e, X0, X1
	VPMAXUD      X1, X0, X0
	VPSHUFD      $0xb1, X0, X1
	VPMAXUD      X1, X0, X0
	VMOVD        X0, AX
	MOVL         AX, ret+24(FP)
	VZEROUPPER
	RET
