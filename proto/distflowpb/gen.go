// Package distflowpb holds the protobuf messages of distflow's wire and graph formats.
//
// Regenerate with `go generate ./proto/...` (needs protoc and protoc-gen-go).
package distflowpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative graph.proto
