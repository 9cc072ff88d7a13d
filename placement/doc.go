// Package placement names devices and decides where each node of a graph
// runs.
//
// Device names follow TensorFlow: "/job:ps/task:0/cpu:0" (the canonical
// short form), partial names such as "/job:ps" or "/cpu:0" that users write
// in device scopes, and the long form "/job:ps/replica:0/task:0/device:CPU:0".
//
//	devices := placement.DevicesOf(spec) // one CPU per task
//	devices, err := placement.FilterDevices(devices, []string{"/job:ps", "/job:worker/task:1"})
//	where, err := placement.Place(nodes, placement.Options{
//		Devices:       devices,
//		Default:       "/job:worker/task:1",
//		SoftPlacement: true,
//	})
//	// where[n] == "/job:ps/task:0/cpu:0", ...
//
// Place keeps a variable and every op that takes it by reference (Assign,
// Apply*) on one device. ReplicaDeviceSetter is the graph-building half of
// between-graph replication: a graph.DeviceFunc that sends variables to ps
// tasks (round-robin or balanced by bytes) and everything else to the
// worker:
//
//	s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(placement.ReplicaConfig{
//		PSTasks: 2, WorkerDevice: "/job:worker/task:1",
//	}))
//
// Place and the parsing functions are pure and safe for concurrent use.
package placement
