package worker

import "github.com/distflow/distflow/service"

// The worker service's interfaces and errors live in package service, apart
// from this implementation; these names forward to them.
type (
	// Service is service.Worker, which *Worker implements.
	Service = service.Worker
	// Lender is service.Lender.
	Lender = service.Lender
	// StepFinisher is service.StepFinisher.
	StepFinisher = service.StepFinisher
	// BatchReceiver is service.BatchReceiver.
	BatchReceiver = service.BatchReceiver
	// BatchLender is service.BatchLender.
	BatchLender = service.BatchLender
	// RunnerInto is service.RunnerInto.
	RunnerInto = service.RunnerInto
	// Cache is service.Workers.
	Cache = service.Workers
)

// Sentinel errors: see package service.
var (
	ErrNoGraph     = service.ErrNoGraph
	ErrNoWorkers   = service.ErrNoWorkers
	ErrUnavailable = service.ErrUnavailable
)
