package savedmodel

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/distflow/distflow/graph"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/tensor"
)

// Model is what an export holds: a prediction graph, its named inputs and
// outputs, and variable values. Write reads it and keeps no reference to it.
type Model struct {
	// Graph contains the inputs and outputs. It may hold training nodes too:
	// Write keeps only what the outputs need.
	Graph *graph.Graph
	// Inputs are the named inputs: Placeholder outputs of Graph.
	Inputs map[string]graph.Output
	// Outputs are the named outputs, outputs of Graph.
	Outputs map[string]graph.Output
	// Variables holds the current value of each Variable node the outputs
	// read, keyed by the node's name ("hidden/W"). Values of other variables
	// (optimizer slots, counters) are ignored; a missing one is an error.
	Variables map[string]*tensor.Tensor
	// GlobalStep is recorded in the metadata.
	GlobalStep int64
}

// deniedOps are ops a prediction graph may not contain: they touch files,
// the network, queues or variables. Load refuses them too, so a hostile
// export cannot use a prediction to write files.
var deniedOps = map[string]bool{
	"SaveVariables": true, "RestoreVariables": true, "Send": true, "Recv": true,
	"FIFOQueue": true, "QueueEnqueueMany": true, "QueueDequeue": true, "QueueClose": true, "QueueSize": true,
	"ConditionalAccumulator": true, "AccumulatorApplyGradient": true, "AccumulatorNumAccumulated": true,
	"AccumulatorNumDropped": true, "AccumulatorSetGlobalStep": true, "AccumulatorTakeGradient": true,
	"IsVariableInitialized": true,
}

// Write exports m to dir, which must not exist (its parent is created if
// needed). It prunes the graph to the ancestors of the outputs, checks that
// every Variable node among them has a value of its dtype and shape in
// m.Variables, and writes the version atomically: into a temporary directory
// beside dir, each file fsynced, model.json last, then renamed to dir. On
// error nothing is left behind. Errors wrap ErrExist when dir exists.
func Write(dir string, m Model) error {
	files, err := encodeModel(m)
	if err != nil {
		return err
	}
	return writeAtomic(dir, files)
}

// WriteVersion exports m to base/<N>, N one more than the highest numbered
// entry of base (complete or not, so that a half-written directory is never
// overwritten; 1 for an empty or missing base), and returns N and the
// directory. A concurrent writer that takes N first makes it try N+1.
func WriteVersion(base string, m Model) (version int64, dir string, err error) {
	files, err := encodeModel(m)
	if err != nil {
		return 0, "", err
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return 0, "", fmt.Errorf("savedmodel: creating base directory: %w", err)
	}
	for range 100 {
		st, err := Scan(base)
		if err != nil {
			return 0, "", err
		}
		next := int64(1)
		if len(st) > 0 {
			next = st[len(st)-1].Version + 1
		}
		dir = filepath.Join(base, strconv.FormatInt(next, 10))
		err = writeAtomic(dir, files)
		if errors.Is(err, ErrExist) {
			continue
		}
		if err != nil {
			return 0, "", err
		}
		return next, dir, nil
	}
	return 0, "", fmt.Errorf("savedmodel: writing a new version under %s: lost the race for a version number 100 times", base)
}

// encodeModel validates m and returns the files of its export, model.json last.
func encodeModel(m Model) ([]namedFile, error) {
	if m.Graph == nil {
		return nil, errors.New("savedmodel: export: the model has no graph")
	}
	if len(m.Inputs) == 0 || len(m.Outputs) == 0 {
		return nil, fmt.Errorf("savedmodel: export: the model needs at least one input and one output (has %d and %d)", len(m.Inputs), len(m.Outputs))
	}
	sig := Signature{Inputs: map[string]TensorInfo{}, Outputs: map[string]TensorInfo{}}
	var feeds, fetches []graph.Output
	for _, name := range slices.Sorted(mapsKeys(m.Inputs)) {
		o := m.Inputs[name]
		if !sigNameRE.MatchString(name) {
			return nil, fmt.Errorf("savedmodel: export: input name %q: want 1 to 256 of [A-Za-z0-9_.-/]", name)
		}
		if !o.Valid() || o.Node.Graph() != m.Graph || o.Node.Op() != "Placeholder" {
			return nil, fmt.Errorf("savedmodel: export: input %q is %v, want a Placeholder of the model's graph", name, o)
		}
		sig.Inputs[name] = TensorInfo{Name: o.Name(), DType: o.DType(), Shape: o.Shape()}
		feeds = append(feeds, o)
	}
	for _, name := range slices.Sorted(mapsKeys(m.Outputs)) {
		o := m.Outputs[name]
		if !sigNameRE.MatchString(name) {
			return nil, fmt.Errorf("savedmodel: export: output name %q: want 1 to 256 of [A-Za-z0-9_.-/]", name)
		}
		if !o.Valid() || o.Node.Graph() != m.Graph || o.Index >= o.Node.NumOutputs() {
			return nil, fmt.Errorf("savedmodel: export: output %q is %v, want an output of the model's graph", name, o)
		}
		sig.Outputs[name] = TensorInfo{Name: o.Name(), DType: o.DType(), Shape: o.Shape()}
		fetches = append(fetches, o)
	}

	keep := map[string]bool{}
	for _, o := range feeds {
		keep[o.Node.Name()] = true
	}
	fed := map[*graph.Node]bool{}
	for _, o := range feeds {
		fed[o.Node] = true
	}
	vars := map[string]*tensor.Tensor{}
	for _, n := range graph.Prune(feeds, fetches, nil, false) {
		keep[n.Name()] = true
		switch {
		case n.Op() == "Placeholder" && !fed[n]:
			return nil, fmt.Errorf("savedmodel: export: the outputs need placeholder %s, which is not an input (add it to Inputs)", n.Name())
		case deniedOps[n.Op()]:
			return nil, fmt.Errorf("savedmodel: export: the outputs need node %s, whose op has side effects a prediction must not have", n)
		case n.Op() == "Variable":
			v, ok := m.Variables[n.Name()]
			if !ok || v == nil {
				return nil, fmt.Errorf("savedmodel: export: the outputs read variable %s, which Variables lacks (add its current value)", n.Name())
			}
			if v.DType() != n.AttrDType("dtype") || !n.AttrShape("shape").AcceptsDims(v.Shape()) {
				return nil, fmt.Errorf("savedmodel: export: variable %s is %v%v, its value is %v%v", n.Name(), n.AttrDType("dtype"), n.AttrShape("shape"), v.DType(), v.Shape())
			}
			vars[n.Name()] = v
		}
		for i := range n.NumInputs() {
			if n.IsRefInput(i) {
				return nil, fmt.Errorf("savedmodel: export: the outputs need node %s, which updates variable %s", n, n.Input(i).Node.Name())
			}
		}
	}

	full := m.Graph.ToProto()
	gd := &pb.GraphDef{Version: full.Version}
	for _, nd := range full.Node {
		if !keep[nd.Name] {
			continue
		}
		nd.Device = "" // an export runs wherever it is loaded
		// A fed node's own inputs are not kept (a placeholder built under
		// control dependencies); drop references to them.
		nd.Input = slices.DeleteFunc(nd.Input, func(in string) bool {
			name, _, _ := graph.ParseTensorName(strings.TrimPrefix(in, "^"))
			return !keep[name]
		})
		gd.Node = append(gd.Node, nd)
	}
	if _, err := graph.FromProto(gd); err != nil {
		return nil, fmt.Errorf("savedmodel: export: the pruned graph does not rebuild: %w", err)
	}
	graphBytes, err := proto.MarshalOptions{Deterministic: true}.Marshal(gd)
	if err != nil {
		return nil, fmt.Errorf("savedmodel: export: encoding the graph: %w", err)
	}
	varBytes, err := encodeVariables(vars)
	if err != nil {
		return nil, err
	}
	md := Metadata{
		Format: formatName, FormatVersion: FormatVersion, GlobalStep: m.GlobalStep,
		Created:   time.Now().UTC().Truncate(time.Second),
		Signature: toJSONSignature(sig),
		Files: map[string]FileInfo{
			graphFile:     fileInfo(graphBytes),
			variablesFile: fileInfo(varBytes),
		},
	}
	mdBytes, err := json.MarshalIndent(md, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("savedmodel: export: encoding the metadata: %w", err)
	}
	return []namedFile{{graphFile, graphBytes}, {variablesFile, varBytes}, {metadataFile, append(mdBytes, '\n')}}, nil
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func fileInfo(b []byte) FileInfo {
	sum := sha256.Sum256(b)
	return FileInfo{Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])}
}

type namedFile struct {
	name string
	data []byte
}

// writeAtomic writes files into a temporary directory beside dir and
// renames it to dir.
func writeAtomic(dir string, files []namedFile) (err error) {
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("savedmodel: creating %s: %w", parent, err)
	}
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("savedmodel: writing %s: %w (choose a new directory, or use WriteVersion)", dir, ErrExist)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("savedmodel: creating a temporary directory: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	for _, f := range files {
		if err := writeFileSync(filepath.Join(tmp, f.name), f.data); err != nil {
			return err
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("savedmodel: %w", err)
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	// Rename replaces an empty directory silently: check again just before.
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("savedmodel: writing %s: %w", dir, ErrExist)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			return fmt.Errorf("savedmodel: writing %s: %w", dir, ErrExist)
		}
		return fmt.Errorf("savedmodel: renaming %s into place: %w", tmp, err)
	}
	return syncDir(parent)
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("savedmodel: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("savedmodel: writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("savedmodel: syncing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("savedmodel: closing %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("savedmodel: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("savedmodel: syncing directory %s: %w", dir, err)
	}
	return nil
}
