// Package models builds the reference workloads of distflow as graphs: the
// linear regression, the MLP and the two-convolution CNN of the project's
// specification, written with package layers and losses, and the
// wide-and-deep CTR model. Each builder returns a Model whose tensors a
// training loop feeds and fetches; the same builders serve single-process
// and cluster runs, and ModelFn gives each as an estimator model function.
//
//	s := graph.NewScope()
//	m, _ := models.Build(s, "mlp", models.Config{Seed: 1})
//	train, _ := train.Minimize(s, train.NewGradientDescent(0.5), m.Loss, train.CreateGlobalStep(s))
package models
