// Package distflowpb holds the protobuf messages of distflow's wire and graph formats.
//
// Regenerate with `go generate ./proto/...` (needs protoc, protoc-gen-go and protoc-gen-go-grpc).
package distflowpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative graph.proto worker.proto master.proto event.proto allreduce.proto
