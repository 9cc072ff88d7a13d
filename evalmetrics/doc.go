// Package evalmetrics holds the streaming evaluation metrics, as
// TensorFlow's tf.metrics: accuracy, precision, recall, AUC, root mean
// squared error, mean absolute error and mean. (Package metrics is the
// processes' Prometheus metrics, another thing.)
//
// Each returns its value and its update op over local accumulator
// variables, so a metric over an evaluation set split into batches is the
// metric of the whole set (an RMSE or an AUC is not the mean of the
// batches'). In a model function they are the estimator's eval metrics:
//
//	if mode == estimator.Eval {
//		spec.EvalMetrics = map[string]estimator.Metric{
//			"auc":    estimator.StreamingMetric(evalmetrics.AUC(s, labels, probabilities, 200, evalmetrics.ROC)),
//			"recall": estimator.StreamingMetric(evalmetrics.Recall(s, labels, predicted)),
//		}
//	}
//
// By hand: run ops.LocalVariablesInitializer, then the update with every
// batch, then fetch the value:
//
//	value, update := evalmetrics.RootMeanSquaredError(s, labels, predictions)
//	init := ops.LocalVariablesInitializer(s)
//	sess.Run(ctx, nil, nil, []*graph.Node{init})
//	for each batch { sess.Run(ctx, feeds, nil, []*graph.Node{update}) }
//	out, _ := sess.Run(ctx, nil, []graph.Output{value}, nil)
//
// The accumulators are float64 local variables (ops.NewLocalVariable):
// never saved in checkpoints nor expected by them, and never shared, so a
// model function may build its metrics in evaluation only. The metrics
// take no weights.
package evalmetrics
