package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/distflow/distflow/graph"
	"github.com/distflow/distflow/ops"
	"github.com/distflow/distflow/tensor"
)

// Runner runs graph steps; *session.Session (local or remote) is one.
type Runner interface {
	Run(ctx context.Context, feeds map[graph.Output]*tensor.Tensor, fetches []graph.Output, targets []*graph.Node) ([]*tensor.Tensor, error)
}

// DefaultKeep is the number of checkpoints a Saver keeps when
// SaverConfig.Keep is 0.
const DefaultKeep = 5

// SaverConfig configures NewSaver.
type SaverConfig struct {
	// Dir is the checkpoint directory; required. Every task that holds
	// variables writes its shard there, so on a cluster of several machines
	// it must be on a filesystem they share (tasks of one machine, as with
	// --local-cluster, simply share the directory).
	Dir string
	// Basename names the checkpoints: "<Basename>-<step>". "" means
	// "model.ckpt". It must not contain a path separator.
	Basename string
	// Keep is how many complete checkpoints Save keeps: 0 means DefaultKeep,
	// a negative number keeps them all.
	Keep int
	// Logger receives a record per checkpoint saved or restored and the
	// warnings about invalid checkpoints; nil means slog.Default().
	Logger *slog.Logger
	// Also are more directories whose checkpoints (of Basename)
	// RestoreLatest considers: it restores the newest valid one of Dir and
	// of these, so that checkpoints another task saved into a directory of
	// its own (a worker standing in for an absent chief) are restored.
	// Save writes to Dir only, and retention never touches these.
	Also []string
}

func (c *SaverConfig) validate() error {
	if c.Dir == "" {
		return errors.New("checkpoint: SaverConfig.Dir is empty")
	}
	if c.Basename == "" {
		c.Basename = "model.ckpt"
	}
	if strings.ContainsAny(c.Basename, `/\`) {
		return fmt.Errorf("checkpoint: SaverConfig.Basename %q contains a path separator", c.Basename)
	}
	if c.Keep == 0 {
		c.Keep = DefaultKeep
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Saver saves and restores a set of variables through graph nodes placed
// where the variables live: one SaveVariables and one RestoreVariables node
// per device, so each task (each ps) writes and reads its own shard and the
// values never cross the network. The caller of Save (the chief) gathers
// the shards' descriptions and writes the index.
//
// A Saver is safe for concurrent use, but two Saves of the same step at
// once would race on the files: save from one goroutine of one task.
type Saver struct {
	cfg     SaverConfig
	devices []string // one per shard, sorted
	tables  []ops.HashTableShard
	// restoredRows counts the rows each table shard restored.
	restoredRows []graph.Output
	step         graph.Output
	saves        []graph.Output
	restore      *graph.Node
	// also are the restore nodes of SaverConfig.Also, in its order.
	also []savedIn
	// verified spares retention reading again, at every save, the
	// checkpoints it has already found valid.
	verified VerifyCache
}

// savedIn restores the Saver's variables from one more directory.
type savedIn struct {
	dir     string
	rows    []graph.Output
	restore *graph.Node
}

// NewSaver adds to the scope's graph the nodes that save and restore vars
// (nil means every variable of the graph, ops.GlobalVariables), under the
// name scope "save". Variables are grouped by their node's device (the
// device request, as set by the scope or a device function such as the
// replica device setter); each group becomes one shard. Variables without a
// device form one group, placed as the session places them.
//
// Every hash embedding table the graph uses (ops.HashTables) is saved
// too, whatever vars says (a table is not a variable): each table shard
// writes its rows, Adagrad accumulators and lookup counts in a data file
// of its own from the task that holds it, and restores by reading every
// saved shard of its table and keeping the rows that hash to it, so that
// a table restores into another number of shards (ps tasks).
//
// Build the Saver after the whole model (and the global step) so that vars
// is complete, and before the session's first Run if you can (the nodes are
// shipped with the graph; a remote session also ships later additions).
func NewSaver(s *graph.Scope, vars []*ops.Variable, cfg SaverConfig) (*Saver, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if s.Err() != nil {
		return nil, fmt.Errorf("checkpoint: NewSaver: the scope has an error: %w", s.Err())
	}
	if vars == nil {
		vars = ops.GlobalVariables(s.Graph())
	}
	tables, err := ops.HashTables(s.Graph())
	if err != nil {
		return nil, fmt.Errorf("checkpoint: NewSaver: %w", err)
	}
	if len(vars) == 0 && len(tables) == 0 {
		return nil, errors.New("checkpoint: NewSaver: no variables or hash embedding tables to save")
	}
	groups := map[string][]graph.Output{}
	seen := map[string]bool{}
	for _, v := range vars {
		if v == nil {
			return nil, errors.New("checkpoint: NewSaver: a variable is nil")
		}
		if seen[v.Name()] {
			return nil, fmt.Errorf("checkpoint: NewSaver: variable %q is listed twice", v.Name())
		}
		seen[v.Name()] = true
		dev := v.Node().Device()
		groups[dev] = append(groups[dev], v.Value())
	}
	sv := &Saver{cfg: cfg, tables: tables}
	for d := range groups {
		sv.devices = append(sv.devices, d)
	}
	sort.Strings(sv.devices)

	ss := s.SubScope("save")
	sv.step = ops.Placeholder(ss, "step", tensor.Int64, tensor.ScalarShape())
	var restores []*graph.Node
	// Data files: one per device of variables, then one per hash table shard.
	files := len(sv.devices) + len(tables)
	for i, d := range sv.devices {
		ds := ss.WithDevice(d)
		sv.saves = append(sv.saves, ops.SaveVariables(ds, sv.step, groups[d], cfg.Dir, cfg.Basename, i, files))
		restores = append(restores, ops.RestoreVariables(ds, sv.step, groups[d], cfg.Dir, cfg.Basename))
	}
	for i, h := range tables {
		ds := ss.WithDevice(h.Device)
		sv.saves = append(sv.saves, ops.SaveHashTable(ds, sv.step, h, cfg.Dir, cfg.Basename, len(sv.devices)+i, files))
		rows := ops.RestoreHashTable(ds, sv.step, h, cfg.Dir, cfg.Basename)
		sv.restoredRows = append(sv.restoredRows, rows)
		restores = append(restores, rows.Node)
	}
	sv.restore = ops.Group(ss, "restore_all", restores...)
	for k, dir := range cfg.Also {
		in := savedIn{dir: dir}
		var nodes []*graph.Node
		for _, d := range sv.devices {
			nodes = append(nodes, ops.RestoreVariables(ss.WithDevice(d), sv.step, groups[d], dir, cfg.Basename))
		}
		for _, h := range tables {
			rows := ops.RestoreHashTable(ss.WithDevice(h.Device), sv.step, h, dir, cfg.Basename)
			in.rows = append(in.rows, rows)
			nodes = append(nodes, rows.Node)
		}
		in.restore = ops.Group(ss, fmt.Sprintf("restore_all_also_%d", k), nodes...)
		sv.also = append(sv.also, in)
	}
	if err := ss.Err(); err != nil {
		return nil, fmt.Errorf("checkpoint: NewSaver: %w", err)
	}
	return sv, nil
}

// Devices returns the device of each shard of variables, in shard order
// ("" for variables without a device). The caller must not modify it.
func (sv *Saver) Devices() []string { return sv.devices }

// HashTables returns the hash embedding table shards the Saver saves, each
// in a data file after the variables' ones. The caller must not modify it.
func (sv *Saver) HashTables() []ops.HashTableShard { return sv.tables }

// Dir returns the checkpoint directory.
func (sv *Saver) Dir() string { return sv.cfg.Dir }

// shardName names data file i's source in errors.
func (sv *Saver) shardName(i int) string {
	if i < len(sv.devices) {
		return fmt.Sprintf("variables of device %q", sv.devices[i])
	}
	h := sv.tables[i-len(sv.devices)]
	return fmt.Sprintf("hash embedding table %q shard %d on %q", h.Name, h.Shard, h.Device)
}

// Save writes the checkpoint of step: it runs the save nodes in one step
// (each device writes its shard, in parallel), writes the index from the
// caller's process, then deletes the checkpoints beyond Keep. It returns
// the checkpoint's prefix ("model.ckpt-100"). If it fails before the index
// is written the checkpoint stays incomplete and Latest ignores it. When
// another saver of the directory wrote a newer checkpoint meanwhile and
// removed this one's files, Save warns and returns the newer prefix with a
// nil error (see superseded).
//
// Each variable is read atomically, but training steps that run during
// Save may update some variables before and others after they are read.
func (sv *Saver) Save(ctx context.Context, r Runner, step int64) (string, error) {
	if step < 0 {
		return "", fmt.Errorf("checkpoint: Save: step %d is negative", step)
	}
	prefix := Prefix(sv.cfg.Basename, step)
	out, err := r.Run(ctx, map[graph.Output]*tensor.Tensor{sv.step: tensor.Scalar(step)}, sv.saves, nil)
	if err != nil {
		return sv.superseded(prefix, step, fmt.Errorf("checkpoint: saving %s in %s: %w", prefix, sv.cfg.Dir, err))
	}
	shards := make([]ShardInfo, len(out))
	for i, t := range out {
		if err := json.Unmarshal(t.Uint8s(), &shards[i]); err != nil {
			return "", fmt.Errorf("checkpoint: saving %s: shard %d (%s) sent a bad description: %w", prefix, i, sv.shardName(i), err)
		}
	}
	if err := WriteIndex(sv.cfg.Dir, prefix, step, shards); err != nil {
		return sv.superseded(prefix, step, err)
	}
	if err := RetainCached(sv.cfg.Dir, sv.cfg.Keep, sv.cfg.Logger, &sv.verified); err != nil {
		// The checkpoint itself is complete; old files are only wasted space.
		sv.cfg.Logger.Warn("checkpoint: could not delete old checkpoints", "dir", sv.cfg.Dir, "err", err)
	}
	sv.cfg.Logger.Info("checkpoint: saved", "dir", sv.cfg.Dir, "prefix", prefix, "shards", len(shards))
	return prefix, nil
}

// superseded handles a save of step that failed with err: when the
// directory holds a valid checkpoint newer than step, another saver wrote
// it while this save ran (a ring's leader stopped mid-save while another
// rank led, then resumed) and its retention removed this save's finished
// files as an incomplete older checkpoint. The directory is then as a
// successful save would have left it, or newer: Save logs a warning and
// returns the newer checkpoint's prefix, not an error that would end
// training. Otherwise it returns err. With one saver per directory no
// checkpoint is newer than the step being saved, so a real failure is
// never hidden.
func (sv *Saver) superseded(prefix string, step int64, err error) (string, error) {
	newer, at, ferr := FindLatest(sv.cfg.Dir, sv.cfg.Basename, sv.cfg.Logger)
	if ferr != nil || at <= step {
		return "", err
	}
	sv.cfg.Logger.Warn("checkpoint: a newer checkpoint was saved by another task while this one was written, and its retention removed this one's files; keeping the newer",
		"dir", sv.cfg.Dir, "prefix", prefix, "newer", newer, "err", err)
	return newer, nil
}

// Restore assigns every variable of the Saver its value in the checkpoint
// of step, each device reading its variables from whichever shards hold
// them (the checkpoint may come from a cluster with another number of ps
// tasks). It verifies the checkpoint first (see Verify).
func (sv *Saver) Restore(ctx context.Context, r Runner, step int64) error {
	return sv.restoreFrom(ctx, r, savedIn{dir: sv.cfg.Dir, rows: sv.restoredRows, restore: sv.restore}, step)
}

func (sv *Saver) restoreFrom(ctx context.Context, r Runner, in savedIn, step int64) error {
	prefix := Prefix(sv.cfg.Basename, step)
	if err := Verify(in.dir, prefix); err != nil {
		return err
	}
	out, err := r.Run(ctx, map[graph.Output]*tensor.Tensor{sv.step: tensor.Scalar(step)}, in.rows, []*graph.Node{in.restore})
	if err != nil {
		return fmt.Errorf("checkpoint: restoring %s from %s: %w", prefix, in.dir, err)
	}
	attrs := []any{"dir", in.dir, "prefix", prefix}
	if len(out) > 0 {
		// "wide/emb: 1290+1310 rows": each shard's, so that a log shows
		// that a restarted ps got its rows back.
		var rows []string
		for i, h := range sv.tables {
			if i == 0 || sv.tables[i-1].Name != h.Name {
				rows = append(rows, h.Name+": ")
			} else {
				rows[len(rows)-1] += "+"
			}
			rows[len(rows)-1] += fmt.Sprint(out[i].Int64s()[0])
		}
		attrs = append(attrs, "hash_rows", strings.Join(rows, ", "))
	}
	sv.cfg.Logger.Info("checkpoint: restored", attrs...)
	return nil
}

// RestoreLatest restores the newest complete and valid checkpoint of the
// Saver's basename (see FindLatest, which skips bad ones with a warning) in
// Dir and the directories of SaverConfig.Also (Dir's on a tie). ok is
// false, with no error, when there is none: initialise the variables
// instead.
func (sv *Saver) RestoreLatest(ctx context.Context, r Runner) (step int64, ok bool, err error) {
	from := savedIn{dir: sv.cfg.Dir, rows: sv.restoredRows, restore: sv.restore}
	_, step, err = FindLatest(sv.cfg.Dir, sv.cfg.Basename, sv.cfg.Logger)
	found := err == nil
	if err != nil && !errors.Is(err, ErrNoCheckpoint) {
		return 0, false, err
	}
	for _, in := range sv.also {
		_, s, err := FindLatest(in.dir, sv.cfg.Basename, sv.cfg.Logger)
		if errors.Is(err, ErrNoCheckpoint) {
			continue
		}
		if err != nil {
			// Another task's directory is a fallback: one that cannot be
			// read does not stop a restore from Dir.
			sv.cfg.Logger.Warn("checkpoint: could not look for checkpoints; skipping the directory", "dir", in.dir, "err", err)
			continue
		}
		if !found || s > step {
			from, step, found = in, s, true
		}
	}
	if !found {
		return 0, false, nil
	}
	if err := sv.restoreFrom(ctx, r, from, step); err != nil {
		return 0, false, err
	}
	return step, true, nil
}
