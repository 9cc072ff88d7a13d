package grad

func init() {
	RegisterNone("TopKCompress", "it sends part of a gradient and keeps the rest; it is applied to gradients, not differentiated")
}
