// Package pki makes and loads the certificates that secure a distflow
// cluster, and turns them into the rpc.Options of a task or a tool: mutual
// TLS with one cluster CA on every connection, and a membership check on
// every call (the peer's certificate chains to the CA, carries this
// cluster's id and names a task of the cluster spec, or a client allowed to
// call the services tools use). It is the edge where security is decided:
// nothing else in distflow reads a certificate.
//
//	certs, err := pki.Create(pki.CreateConfig{Dir: "certs", Spec: spec})
//	// certs/ca.crt, ca.key (keep it apart), ps.0.crt, ps.0.key,
//	// worker.0.crt, ..., client.crt, client.key
//
//	opts, err := pki.Security{CertsDir: "certs"}.TaskOptions(spec, self, log)
//	srv, err := server.New(server.Config{Cluster: spec, Task: self, RPC: opts})
//
// A certificate names its holder by a URI SAN:
// distflow://CLUSTER-ID/job/worker/task/1 for a task, and
// distflow://CLUSTER-ID/client/NAME for a tool; the CA carries
// distflow://CLUSTER-ID. A certificate of another cluster, made by the same
// CA or another, is refused by name.
//
// Security is on by default: Security.TaskOptions refuses a cluster with
// an address that is not loopback unless certificates, a cluster token, or
// Insecure are given (ErrInsecure). A cluster token (a shared secret in a
// file, from which each task's credential and the tools' are derived and
// checked on every call) is the alternative for setups without per-task
// certificates; it does not encrypt anything. Tools get a tool token
// (WriteToolToken), which lets them act as no task.
package pki
