package worker_test

import (
	"testing"

	"github.com/distflow/distflow/worker"
	"github.com/distflow/distflow/worker/workertest"
)

// TestWorkerServiceInProcess runs the conformance suite on the worker
// itself, the reference every transport's client is held to.
func TestWorkerServiceInProcess(t *testing.T) {
	workertest.Run(t, func(_ *testing.T, w *worker.Worker) worker.Service { return w }, workertest.Options{})
}
