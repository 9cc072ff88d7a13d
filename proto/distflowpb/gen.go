// Package distflowpb holds the protobuf messages of distflow's wire and graph formats.
//
// The gRPC services (*_service.proto beside the messages) are generated into
// package rpc/rpcpb, which only the rpc adapters import: the messages' users
// (master, worker, graph, session, summary, ...) do not link gRPC.
//
// Regenerate both with `go generate ./proto/...`. It needs protoc (Debian's
// protobuf-compiler, 3.21.12 made the files here) and the two plugins on PATH:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12       # the version in go.mod
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
package distflowpb

//go:generate protoc --go_out=../.. --go_opt=module=github.com/distflow/distflow --go-grpc_out=../.. --go-grpc_opt=module=github.com/distflow/distflow graph.proto stepstats.proto worker.proto master.proto event.proto allreduce.proto worker_service.proto master_service.proto allreduce_service.proto
