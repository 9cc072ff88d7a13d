// Package checkpoint saves and restores variables: sharded data files, an
// index written last, atomic writes and checksums, and a Saver that makes
// every task save and restore the variables it holds.
//
//	s := graph.NewScope().WithDeviceFunc(placement.ReplicaDeviceSetter(cfg))
//	... build the model and train.CreateGlobalStep(s) ...
//	sv, err := checkpoint.NewSaver(s, nil, checkpoint.SaverConfig{Dir: "/shared/run1", Keep: 5})
//	sess, err := session.New(s.Graph(), session.WithMaster(m, nil))
//
//	// At startup, on the chief: resume, or initialise.
//	step, ok, err := sv.RestoreLatest(ctx, sess)
//	if !ok { _, err = sess.Run(ctx, nil, nil, []*graph.Node{init}) }
//
//	// Every N steps or seconds, on the chief:
//	prefix, err := sv.Save(ctx, sess, globalStep) // "model.ckpt-1200"
//
// # Files
//
// A checkpoint "model.ckpt-<step>" in a directory is:
//
//   - one data file per device holding variables (each ps task),
//     "model.ckpt-<step>.data-<i>-of-<n>": a header, then one record per
//     variable (name, dtype, dims, raw little-endian bytes), each with a
//     CRC32C; see WriteShard;
//   - the index "model.ckpt-<step>.index", JSON with its own CRC32C: step,
//     time, the shards (file, size, CRC32C of the whole file) and, for every
//     variable, its dtype, shape, shard, offset, length and CRC32C; see
//     WriteIndex. The chief writes it last: a checkpoint without a valid
//     index is incomplete and ignored;
//   - the state file "checkpoint" lists the retained complete checkpoints,
//     newest last (TensorFlow's text form).
//
// Every file is written to a temporary file in the same directory, synced,
// renamed into place, and the directory synced: a crash leaves either the
// old state or the new one, plus perhaps a "*.tmp*" file that Retain
// deletes later.
//
// Latest (and FindLatest) return the newest checkpoint that is complete and
// valid, verifying the index and every shard's size and checksum; a bad one
// is skipped, with a slog warning naming the file, for the one before it.
// Read checks each record's checksum; its errors wrap ErrCorrupt or
// ErrIncomplete. Retain keeps the newest K valid checkpoints (it verifies
// them, newest first) and deletes corrupt ones, so a valid checkpoint is
// never deleted in favour of a corrupt one.
//
// # The Saver and the graph ops
//
// NewSaver groups the variables by their node's device and adds, per
// device, a SaveVariables and a RestoreVariables node placed there (ops
// package builders; kernels in kernel/cpu). Save runs the save nodes in one
// step: each ps task reads its variables under their locks and writes its
// own shard, in parallel, and returns the shard's description (the JSON of
// a ShardInfo, as a uint8 tensor) to the caller, which writes the index and
// applies Retain. Restore runs the restore nodes: each device reads the
// index and looks its variables up by name in whichever shard holds them,
// so a checkpoint saved with 2 ps tasks restores into a cluster with 1 or 3.
//
// Hash embedding tables (ops.HashEmbedding) are saved too: each table
// shard writes its rows, Adagrad accumulators and lookup counts as records
// "hash_embedding/<name>/shard_<i>/{keys,values,accumulators,counts}" in
// a data file of its own (after the variables' files), from the task that
// holds it; a restore reads every saved shard of its table and keeps the
// rows whose id hashes to it, so a table saved on 2 ps tasks restores
// onto 1 or 3. The format is unchanged: these are ordinary records.
//
// The kernels read and write the directory on the task that runs them.
// Tasks of one machine (a local cluster) share it as is; a cluster of
// several machines needs the directory on a shared filesystem (NFS, a
// cluster filesystem), as TensorFlow's savers do.
//
// Contracts: the functions of this package are safe for concurrent use on
// different checkpoints; a Saver is safe for concurrent use, but saves of
// one step must not overlap. A Saver saves each variable atomically, not
// all variables at one instant: steps that run during Save may land
// between two reads (as in TensorFlow).
package checkpoint
