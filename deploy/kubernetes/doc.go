// Package kubernetes holds distflow's Kubernetes manifests (indexed-jobs.yaml,
// tfjob.yaml) and the tests that validate them offline: every object is
// decoded strictly into the Kubernetes API types (k8s.io/api, and the v1
// training operator's TFJob type), checked with the API server's own name
// and label validation and, for the TFJob, with the operator's webhook
// validation; every pod's TF_CONFIG is built as the cluster would build it
// and parsed by package cluster.
//
// It is a module of its own, so that the Kubernetes libraries stay out of
// distflow's dependencies:
//
//	cd deploy/kubernetes && go test ./...
package kubernetes
