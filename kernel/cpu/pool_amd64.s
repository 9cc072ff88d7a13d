//go:build !purego

#include "textflag.h"

// func maxPool2x2(x0, x1, y *float32, ow, c int)
//
// One output row of a 2x2, stride-2 max pooling over c channels (a multiple
// of 8): x0 and x1 are the two input rows, y the output row of ow pixels.
// The window is scanned row-major and a later value replaces the running
// maximum only when it is greater, as in nnMaxPoolT: VMAXPS(v, best)
// returns best when they are equal or either is NaN.
TEXT ·maxPool2x2(SB), NOSPLIT, $0-40
	MOVQ x0+0(FP), SI
	MOVQ x1+8(FP), DI
	MOVQ y+16(FP), DX
	MOVQ ow+24(FP), CX
	MOVQ c+32(FP), R8
	SHLQ $2, R8

pixel:
	LEAQ (SI)(R8*1), R12
	LEAQ (DI)(R8*1), R13
	XORQ AX, AX
	MOVQ R8, R9
	SHRQ $5, R9

lanes:
	VMOVUPS (SI)(AX*1), Y0
	VMOVUPS (R12)(AX*1), Y1
	VMAXPS  Y0, Y1, Y0
	VMOVUPS (DI)(AX*1), Y1
	VMAXPS  Y0, Y1, Y0
	VMOVUPS (R13)(AX*1), Y1
	VMAXPS  Y0, Y1, Y0
	VMOVUPS Y0, (DX)(AX*1)
	ADDQ    $32, AX
	DECQ    R9
	JNZ     lanes

	LEAQ (SI)(R8*2), SI
	LEAQ (DI)(R8*2), DI
	ADDQ R8, DX
	DECQ CX
	JNZ  pixel
	VZEROUPPER
	RET

// func maxPoolGrad2x2(x0, x1, dy, dx0, dx1 *float32, ow, c int)
//
// The gradient of maxPool2x2 for one output row: each dy value goes to the
// element maxPool2x2 picked (the last one strictly greater than the running
// maximum), zeros to the other three. Every element of the two dx rows is
// written.
TEXT ·maxPoolGrad2x2(SB), NOSPLIT, $0-56
	MOVQ x0+0(FP), SI
	MOVQ x1+8(FP), DI
	MOVQ dy+16(FP), DX
	MOVQ dx0+24(FP), R10
	MOVQ dx1+32(FP), R11
	MOVQ ow+40(FP), CX
	MOVQ c+48(FP), R8
	SHLQ $2, R8

gpixel:
	LEAQ (SI)(R8*1), R12
	LEAQ (DI)(R8*1), R13
	LEAQ (R10)(R8*1), R14
	LEAQ (R11)(R8*1), BX
	XORQ AX, AX
	MOVQ R8, R9
	SHRQ $5, R9

glanes:
	VMOVUPS (SI)(AX*1), Y0       // best = x00
	VMOVUPS (R12)(AX*1), Y1      // x01
	VCMPPS  $0x1e, Y0, Y1, Y5    // g1 = x01 > best
	VMAXPS  Y0, Y1, Y0
	VMOVUPS (DI)(AX*1), Y2       // x10
	VCMPPS  $0x1e, Y0, Y2, Y6    // g2
	VMAXPS  Y0, Y2, Y0
	VMOVUPS (R13)(AX*1), Y3      // x11
	VCMPPS  $0x1e, Y0, Y3, Y7    // g3
	VMOVUPS (DX)(AX*1), Y4       // t = dy
	VANDPS  Y4, Y7, Y3           // dx11 = g3 & t
	VANDNPS Y4, Y7, Y4           // t = ~g3 & t
	VANDPS  Y4, Y6, Y2           // dx10 = g2 & t
	VANDNPS Y4, Y6, Y4           // t = ~g2 & t
	VANDPS  Y4, Y5, Y1           // dx01 = g1 & t
	VANDNPS Y4, Y5, Y0           // dx00 = ~g1 & t
	VMOVUPS Y0, (R10)(AX*1)
	VMOVUPS Y1, (R14)(AX*1)
	VMOVUPS Y2, (R11)(AX*1)
	VMOVUPS Y3, (BX)(AX*1)
	ADDQ    $32, AX
	DECQ    R9
	JNZ     glanes

	LEAQ (SI)(R8*2), SI
	LEAQ (DI)(R8*2), DI
	LEAQ (R10)(R8*2), R10
	LEAQ (R11)(R8*2), R11
	ADDQ R8, DX
	DECQ CX
	JNZ  gpixel
	VZEROUPPER
	RET
