// Package rpcpb holds the generated gRPC stubs of distflow's services
// (WorkerService, MasterService, Ring), whose messages are in package
// distflowpb. Only the rpc adapters import it: the packages that use the
// messages (master, worker, graph, session, ...) do not link gRPC.
//
// The stubs are generated from proto/distflowpb/*_service.proto by
// `go generate ./proto/...`.
package rpcpb
