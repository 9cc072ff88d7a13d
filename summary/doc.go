// Package summary writes TensorBoard event files: scalars and histograms,
// in TFRecord framing (length, masked CRC32C of the length, data, masked
// CRC32C of the data) holding Event protos, the first of which carries the
// file_version "brain.Event:2".
//
// Each task writes its own file; files are created exclusively and named
// events.out.tfevents.<seconds>.<host>.<pid>.<suffix>, so writers never share
// one even in a shared log directory:
//
//	w, err := summary.NewWriter(logdir, summary.WriterOptions{Suffix: "worker-0"})
//	if err != nil { ... }
//	defer w.Close()
//	w.AddScalar("loss", step, loss)
//	w.AddHistogram("weights", step, ws)
//
// Summaries computed in the graph (ops.ScalarSummary, ops.HistogramSummary,
// ops.MergeAllSummaries) are serialised Summary protos carried by a uint8
// tensor; fetch it and hand the bytes to Writer.AddSummary:
//
//	merged := ops.MergeAllSummaries(s)
//	out, err := sess.Run(ctx, feeds, []graph.Output{merged}, nil)
//	w.AddSummary(out[0].Uint8s(), step)
//
// EncodeScalar, EncodeHistogram and Merge build such protos directly (the
// kernels use them); ReadFile and RecordReader read event files back,
// reporting a truncated final record (ErrTruncated: a writer died or is
// still writing) or a checksum mismatch (ErrCorrupt).
//
// The messages (proto/distflowpb/event.proto) keep TensorFlow's field
// numbers; their proto package name does not reach the wire.
package summary
