// Package distflowpb holds the protobuf messages of distflow's wire and graph formats.
//
// The gRPC services (*_service.proto beside the messages) are generated into
// package rpc/rpcpb, which only the rpc adapters import: the messages' users
// (master, worker, graph, session, summary, ...) do not link gRPC.
//
// Regenerate both with `go generate ./proto/...` (needs protoc, protoc-gen-go and
// protoc-gen-go-grpc; see README.md).
package distflowpb

//go:generate protoc --go_out=../.. --go_opt=module=github.com/distflow/distflow --go-grpc_out=../.. --go-grpc_opt=module=github.com/distflow/distflow graph.proto worker.proto master.proto event.proto allreduce.proto worker_service.proto master_service.proto allreduce_service.proto
