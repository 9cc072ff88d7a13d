package master

import "github.com/distflow/distflow/service"

// Service is service.Master, which *Master implements and package rpc
// adapts to gRPC both ways.
type Service = service.Master
