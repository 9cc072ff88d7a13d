package grad

func init() {
	RegisterNone("Send", "transfers a tensor between partitions; gradients are built before partitioning")
	RegisterNone("Recv", "transfers a tensor between partitions; gradients are built before partitioning")
}
