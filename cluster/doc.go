// Package cluster describes a distflow cluster: which jobs exist, and the
// ordered host:port addresses of each job's tasks.
//
// A Spec is built once, validated, and never changes, so it is safe for
// concurrent use. Users of TensorFlow 1.x describe a cluster with flags or
// with the TF_CONFIG environment variable; both are accepted:
//
//	spec, self, err := cluster.FromFlags("ps0:2222", "w0:2222, w1:2222", "", "worker", 1)
//	if err != nil {
//		log.Fatal(err) // says what is wrong and where, before anything starts
//	}
//	fmt.Println(self)                    // /job:worker/task:1
//	fmt.Println(spec.Address(self))      // w1:2222 <nil>
//	fmt.Println(spec.TaskNames())        // [/job:ps/task:0 /job:worker/task:0 /job:worker/task:1]
//
//	// The same cluster, the way a scheduler such as Kubernetes starts tasks:
//	//   TF_CONFIG='{"cluster": {"ps": ["ps0:2222"], "worker": ["w0:2222", "w1:2222"]},
//	//               "task": {"type": "worker", "index": 1}}'
//	spec, self, ok, warnings, err := cluster.FromEnvWarn()
//	for _, w := range warnings {
//		slog.Warn(w) // TF_CONFIG: unknown field "tsk" (did you mean "task"?); ...
//	}
//
// Validation rejects malformed descriptions with an error that names the
// offending job, task, address or JSON offset; the sentinel errors (ErrBadConfig,
// ErrUnknownJob, ErrIndexOutOfRange, ErrDuplicateAddress, ErrBadAddress,
// ErrBadJobName, ErrEmptyJob, ErrNoAddress) let callers test the kind. Two
// tasks may not share an address however it is written (host names without
// case, ports by value, localhost as 127.0.0.1 and ::1); no name is resolved.
// TF_CONFIG keys that distflow does not read are not errors, as TensorFlow
// has keys distflow has no use for, but TFConfigWarnings lists the ones that
// look like mistakes.
//
// A task is named "/job:<job>/task:<index>" (TaskID.String); that name is the
// key that placement, partitioning and the worker cache use.
package cluster
