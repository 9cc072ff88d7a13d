// Package estimator is distflow's training protocol as a library, in the
// spirit of tf.estimator: the user writes a model function and an input
// function; the estimator owns the loop, the cluster roles, checkpoints,
// summaries, hooks, evaluation, export, and the end of training.
//
//	model := func(s *graph.Scope, f estimator.Features, labels graph.Output, mode estimator.Mode) (*estimator.Spec, error) {
//		w := ops.NewVariable(s, "w", tensor.Float32, []int{4, 1}, ops.ZerosInit())
//		pred := ops.MatMul(s, f.Get(s, "x"), w.Value(), false, false)
//		spec := &estimator.Spec{Predictions: map[string]graph.Output{"y": pred}}
//		if mode != estimator.Predict {
//			spec.Loss = ops.Mean(s, ops.SquaredDifference(s, pred, labels), nil, false)
//			spec.Optimizer = train.NewGradientDescent(0.1)
//		}
//		return spec, nil
//	}
//	cfg, _ := estimator.FromEnvironment(estimator.Sync{})   // TF_CONFIG, or one process
//	est, _ := estimator.New(model, cfg)
//	res, err := estimator.TrainAndEvaluate(ctx, est,
//		estimator.TrainSpec{Input: trainInput, Stop: estimator.Stop{MaxSteps: 1000}},
//		estimator.EvalSpec{Input: evalInput, ExportDir: "/models/mine"})
//
// The same program runs in one process or as any task of a cluster
// (RunConfig.Cluster and Task, from TF_CONFIG or the TensorFlow 1.x
// flags): a ps serves until the chief ends training; every worker trains
// its replica; the chief also initialises or restores the model, saves
// checkpoints, keeps the trained model, waits for the other replicas,
// stops the cluster, then evaluates and exports. The strategy (Async,
// Sync, Staleness, InGraph, AllReduce, Averaging) is a value of the
// configuration. Package localcluster starts such a program as a whole
// cluster of local processes.
//
// Failures are state, not surprises. Replicas watch each other with
// heartbeats (GetStatus; RunConfig.LostAfter): a peer is suspect at its
// first unanswered heartbeat, named in a warning after half the lost
// deadline, lost after it, and let back in when it answers again (the
// same process woken up, or a new one with its task id). In every
// strategy training goes on without a lost worker: Sync aggregates among
// the live replicas (the round a lost one holds up is abandoned); the
// staleness bound ignores it; AllReduce and Averaging re-form the ring
// among the live ranks (the lowest live rank leads: it sends the views,
// generation, step, members) and grow it back; Async and InGraph wait for the task on its address. A
// restarted chief goes on from the variables the ps tasks hold, or from
// the latest checkpoint (a lost ps is restored from it in Async and
// InGraph); the leader of a ring saves the checkpoints, every rank
// restores the latest when it starts, and the members of a new view take
// the model of the one furthest on.
//
// The end of training is state, not an event a crash can lose: after the
// other replicas have finished and its final checkpoint, the chief writes
// a marker with its result in the checkpoint directory, then stops the ps
// tasks. A replica cut off meanwhile reads it and exits; and Train on a
// directory whose training has ended (a chief restarted after it died
// there, or the same program run again) trains nothing, changes no
// checkpoint, finishes stopping the cluster, and returns that result, as
// tf.estimator returns at once from a model directory at its last step.
//
// A model function is called once per tower and mode, in scopes that
// reuse the first call's variables, so the same code builds the training
// towers, the evaluation graph and the exported prediction graph.
//
// Mistakes in the input are reported where they are made, in the user's
// terms. Features.Get names a feature the input lacks, and the features it
// has (`the model function asked for feature "X"; the input has "x"`).
// TrainAndEvaluate checks the evaluation input's features and labels
// against the training input's (names, dtypes, shapes) before it trains
// (ErrInputMismatch), not after. A loss that becomes NaN or infinite stops
// training with train.ErrNaNLoss (on a cluster, a ps task may refuse the
// non-finite update first: kernel.ErrNonFiniteWrite); Train then reads the
// training input again and, when it holds a NaN or infinity, names the
// feature, batch and element, since such data, not the learning rate, are
// then the likely cause (data.ReadCSV refuses them unless asked).
package estimator
