// Package session runs graphs in process: the local Session of a client.
//
// A Session holds the state of one run of a model (its variables) and runs
// steps: Run feeds tensors, computes the fetched tensors and runs the
// target nodes, executing only the part of the graph they need.
//
//	s := graph.NewScope()
//	x := ops.Placeholder(s, "x", tensor.Float32, tensor.MakeShape(-1, 1))
//	w := ops.NewVariable(s, "W", tensor.Float32, []int{1, 1}, ops.ConstantInit(2))
//	b := ops.NewVariable(s, "b", tensor.Float32, []int{1}, ops.ZerosInit())
//	y := ops.Add(s, ops.MatMul(s, x, w.Value(), false, false), b.Value()) // y = x*W + b
//	init := ops.GlobalVariablesInitializer(s)
//	if err := s.Err(); err != nil { ... }
//
//	sess, err := session.New(s.Graph())
//	defer sess.Close()
//	_, err = sess.Run(ctx, nil, nil, []*graph.Node{init}) // initialise once
//	out, err := sess.Run(ctx,
//		map[graph.Output]*tensor.Tensor{x: tensor.MustFromSlice([]float32{1, 2, 3}, 3, 1)},
//		[]graph.Output{y}, nil) // out[0] is [[2] [4] [6]]
//
// RunNamed does the same with names ("x:0" or "x" for tensors, "init" for
// targets), as a remote client would.
//
// A session imports every CPU kernel (package kernel/cpu). For each
// signature (the sorted fed names, the fetch names in order, the sorted
// target names) it builds an executor once (see package executor) and caches
// it; the graph may grow between runs without invalidating the cache, because
// nodes never change once added. Variables live in the session's
// kernel.Resources, shared with other sessions through WithResources.
//
// # Remote sessions
//
// Open runs the same graph on a cluster: the target "grpc://host:port"
// names a task's master (blank-import package rpc to register the scheme),
// and "" means in process. WithMaster does the same with a master.Service
// at hand. A remote session sends the graph with its first Run and the nodes
// added since before later Runs; it validates names, feeds and targets as
// the local back end does, so the same training code runs both ways:
//
//	import _ "github.com/distflow/distflow/rpc"
//
//	sess, err := session.Open(ctx, "grpc://127.0.0.1:2222", s.Graph())
//	defer sess.Close() // closes the session on the master
//
// Open dials in plaintext, so it accepts only loopback masters; a cluster
// elsewhere is reached with rpc.OpenSession and the cluster's options
// (pki.Security.ClientOptions).
//
// RunTraced also returns the step's timeline (every task's kernels, Sends,
// Recvs and RPCs on the client's clock), the input of a trace.Builder that
// writes a Chrome trace; TraceNextRun asks for the next Run of a training
// loop to be traced that way:
//
//	out, st, err := sess.RunTraced(ctx, feeds, fetches, targets)
//	var b trace.Builder
//	b.Add(st)
//	err = trace.WriteFile("trace-1.json", b.File())
//
// A Session is safe for concurrent use: concurrent Runs execute in parallel
// and share the variables (a read returns a copy; each update is atomic).
package session
