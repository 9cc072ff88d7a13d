package savedmodel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/distflow/distflow/graph"
	pb "github.com/distflow/distflow/proto/distflowpb"
	"github.com/distflow/distflow/session"
	"github.com/distflow/distflow/tensor"
)

// VersionStatus is one numbered entry of a base directory.
type VersionStatus struct {
	Version int64
	Dir     string
	// Err is nil for a complete version; otherwise why it is not complete
	// (wrapping ErrIncomplete or ErrUnsupported).
	Err error
}

// Scan lists the numbered entries of base ("1", "2", ...; names that are not
// canonical positive decimal numbers, such as temporary directories, are
// ignored), ascending, each with whether it is complete: a valid model.json
// whose files exist with their recorded sizes. It does not verify checksums
// (Load does). A missing base wraps ErrNotFound.
func Scan(base string) ([]VersionStatus, error) {
	entries, err := os.ReadDir(base)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("savedmodel: base directory %s does not exist: %w", base, ErrNotFound)
		}
		return nil, fmt.Errorf("savedmodel: listing versions: %w", err)
	}
	var out []VersionStatus
	for _, e := range entries {
		v, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || v <= 0 || strconv.FormatInt(v, 10) != e.Name() {
			continue
		}
		dir := filepath.Join(base, e.Name())
		st := VersionStatus{Version: v, Dir: dir}
		if !e.IsDir() {
			st.Err = fmt.Errorf("savedmodel: %s is not a directory: %w", dir, ErrIncomplete)
		} else if md, _, err := readMetadata(dir); err != nil {
			st.Err = err
		} else {
			for _, name := range []string{graphFile, variablesFile} {
				fi, err := os.Stat(filepath.Join(dir, name))
				if err != nil || fi.Size() != md.Files[name].Size {
					st.Err = fmt.Errorf("savedmodel: %s: %s is missing or does not have its recorded size %d: %w", dir, name, md.Files[name].Size, ErrIncomplete)
					break
				}
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b VersionStatus) int { return cmpInt64(a.Version, b.Version) })
	return out, nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Versions returns the complete versions of base, ascending. Temporary and
// half-written directories are left out. A missing base wraps ErrNotFound.
func Versions(base string) ([]int64, error) {
	st, err := Scan(base)
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, s := range st {
		if s.Err == nil {
			out = append(out, s.Version)
		}
	}
	return out, nil
}

// LoadLatest loads the newest complete version of base. If that version
// fails to load (a corrupt file), it tries the next older one; it fails when
// none loads, with the newest version's error, or with ErrNotFound when base
// has no complete version.
func LoadLatest(base string) (*Predictor, int64, error) {
	vs, err := Versions(base)
	if err != nil {
		return nil, 0, err
	}
	if len(vs) == 0 {
		return nil, 0, fmt.Errorf("savedmodel: %s holds no complete version (export one with savedmodel.WriteVersion): %w", base, ErrNotFound)
	}
	var first error
	for i := len(vs) - 1; i >= 0; i-- {
		p, err := Load(filepath.Join(base, strconv.FormatInt(vs[i], 10)))
		if err == nil {
			return p, vs[i], nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, 0, first
}

// readMetadata reads and parses dir/model.json.
func readMetadata(dir string) (*Metadata, Signature, error) {
	b, err := readBounded(filepath.Join(dir, metadataFile), maxMetadataBytes)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, Signature{}, fmt.Errorf("savedmodel: %s has no %s: the export is half-written or is not an export (re-export it): %w", dir, metadataFile, ErrIncomplete)
		}
		return nil, Signature{}, err
	}
	md, sig, err := ParseMetadata(b)
	if err != nil {
		return nil, Signature{}, fmt.Errorf("savedmodel: %s: %w", dir, err)
	}
	return md, sig, nil
}

// readBounded reads a file that may hold at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("savedmodel: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("savedmodel: %s is not a regular file: %w", path, ErrIncomplete)
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("savedmodel: %s is %d bytes, more than the %d expected: %w", path, fi.Size(), limit, ErrIncomplete)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("savedmodel: reading %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("savedmodel: %s grew beyond %d bytes while being read: %w", path, limit, ErrIncomplete)
	}
	return b, nil
}

// readChecked reads one file of the export and verifies its size and checksum.
func readChecked(dir, name string, want FileInfo) ([]byte, error) {
	path := filepath.Join(dir, name)
	b, err := readBounded(path, want.Size)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("savedmodel: %s is missing (the export is incomplete; re-export it): %w", path, ErrIncomplete)
		}
		return nil, err
	}
	if int64(len(b)) != want.Size {
		return nil, fmt.Errorf("savedmodel: %s is %d bytes, %s records %d (truncated?): %w", path, len(b), metadataFile, want.Size, ErrIncomplete)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != want.SHA256 {
		return nil, fmt.Errorf("savedmodel: %s: checksum mismatch (sha256 %s, %s records %s): the file is corrupt, re-export it: %w", path, got, metadataFile, want.SHA256, ErrIncomplete)
	}
	return b, nil
}

// Predictor runs a loaded export. It is safe for concurrent use; it holds no
// state that predictions change.
type Predictor struct {
	dir     string
	md      *Metadata
	sig     Signature
	sess    *session.Session
	inputs  map[string]graph.Output
	outputs []graph.Output // in the order of outNames
	outName []string
	closed  atomic.Bool
}

// Load loads the export in dir, verifying everything before use (see the
// package documentation). Errors wrap ErrNotFound (no such directory),
// ErrIncomplete (half-written, truncated or corrupt) or ErrUnsupported (a
// format version or graph this build cannot run).
func Load(dir string) (p *Predictor, err error) {
	defer func() {
		if r := recover(); r != nil { // a hostile graph must not crash the caller
			p, err = nil, fmt.Errorf("savedmodel: loading %s: panic: %v: %w", dir, r, ErrUnsupported)
		}
	}()
	fi, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("savedmodel: export directory %s does not exist: %w", dir, ErrNotFound)
		}
		return nil, fmt.Errorf("savedmodel: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("savedmodel: %s is not a directory: %w", dir, ErrNotFound)
	}
	md, sig, err := readMetadata(dir)
	if err != nil {
		return nil, err
	}
	graphBytes, err := readChecked(dir, graphFile, md.Files[graphFile])
	if err != nil {
		return nil, err
	}
	varBytes, err := readChecked(dir, variablesFile, md.Files[variablesFile])
	if err != nil {
		return nil, err
	}
	vars, err := decodeVariables(varBytes)
	if err != nil {
		return nil, fmt.Errorf("savedmodel: %s: %v: %w", dir, err, ErrIncomplete)
	}
	gd := &pb.GraphDef{}
	if err := proto.Unmarshal(graphBytes, gd); err != nil {
		return nil, fmt.Errorf("savedmodel: %s: decoding %s: %v: %w", dir, graphFile, err, ErrIncomplete)
	}
	if err := freezeVariables(gd, vars); err != nil {
		return nil, fmt.Errorf("savedmodel: %s: %v: %w", dir, err, ErrUnsupported)
	}
	g, err := graph.FromProto(gd)
	if err != nil {
		return nil, fmt.Errorf("savedmodel: %s: importing %s: %v: %w", dir, graphFile, err, ErrUnsupported)
	}
	p = &Predictor{dir: dir, md: md, sig: sig, inputs: map[string]graph.Output{}}
	for _, name := range sig.InputNames() {
		ti := sig.Inputs[name]
		o, err := checkTensor(g, "input", name, ti)
		if err != nil {
			return nil, fmt.Errorf("savedmodel: %s: %v: %w", dir, err, ErrIncomplete)
		}
		if o.Node.Op() != "Placeholder" {
			return nil, fmt.Errorf("savedmodel: %s: input %q is %s, not a Placeholder: %w", dir, name, o.Node, ErrIncomplete)
		}
		p.inputs[name] = o
	}
	for _, name := range sig.OutputNames() {
		o, err := checkTensor(g, "output", name, sig.Outputs[name])
		if err != nil {
			return nil, fmt.Errorf("savedmodel: %s: %v: %w", dir, err, ErrIncomplete)
		}
		p.outputs = append(p.outputs, o)
		p.outName = append(p.outName, name)
	}
	p.sess, err = session.New(g)
	if err != nil {
		return nil, fmt.Errorf("savedmodel: %s: %w", dir, err)
	}
	return p, nil
}

// freezeVariables replaces every Variable node of gd by a Const holding its
// value, refuses ops with side effects, and checks that every variable is
// used exactly by a node of its dtype and shape.
func freezeVariables(gd *pb.GraphDef, vars map[string]*tensor.Tensor) error {
	used := 0
	for _, nd := range gd.GetNode() {
		if nd == nil {
			return errors.New("the graph has a nil node")
		}
		if deniedOps[nd.GetOp()] {
			return fmt.Errorf("node %q: op %s has side effects a prediction must not have", nd.GetName(), nd.GetOp())
		}
		if nd.GetOp() != "Variable" {
			continue
		}
		v, ok := vars[nd.GetName()]
		if !ok {
			return fmt.Errorf("variable %q has no value in %s", nd.GetName(), variablesFile)
		}
		used++
		if av := nd.GetAttr()["dtype"]; av == nil || tensor.DType(av.GetType()) != v.DType() {
			return fmt.Errorf("variable %q: the graph's dtype differs from its value's (%v)", nd.GetName(), v.DType())
		}
		if av := nd.GetAttr()["shape"]; av == nil || av.GetShape() == nil || !graph.ShapeFromProto(av.GetShape()).AcceptsDims(v.Shape()) {
			return fmt.Errorf("variable %q: the graph's shape does not accept its value's %v", nd.GetName(), v.Shape())
		}
		if len(nd.GetInput()) != 0 {
			return fmt.Errorf("variable %q has inputs", nd.GetName())
		}
		nd.Op = "Const"
		nd.Attr = map[string]*pb.AttrValue{"value": graph.AttrToProto(v)}
	}
	if used != len(vars) {
		return fmt.Errorf("%s holds %d variables, the graph reads %d", variablesFile, len(vars), used)
	}
	return nil
}

func checkTensor(g *graph.Graph, what, name string, ti TensorInfo) (graph.Output, error) {
	o, err := g.Output(ti.Name)
	if err != nil {
		return graph.Output{}, fmt.Errorf("%s %q: %w", what, name, err)
	}
	if o.Node.NumOutputs() == 0 || strings.Contains(ti.Name, "^") {
		return graph.Output{}, fmt.Errorf("%s %q: tensor %s does not exist", what, name, ti.Name)
	}
	if o.DType() != ti.DType {
		return graph.Output{}, fmt.Errorf("%s %q: the signature says %v, tensor %s is %v", what, name, ti.DType, o, o.DType())
	}
	if !o.Shape().IsCompatibleWith(ti.Shape) {
		return graph.Output{}, fmt.Errorf("%s %q: the signature says shape %v, tensor %s has %v", what, name, ti.Shape, o, o.Shape())
	}
	return o, nil
}

// Signature returns the model's named inputs and outputs. The maps are
// shared: do not modify them.
func (p *Predictor) Signature() Signature { return p.sig }

// Dir returns the directory the predictor was loaded from.
func (p *Predictor) Dir() string { return p.dir }

// GlobalStep returns the global step recorded at export.
func (p *Predictor) GlobalStep() int64 { return p.md.GlobalStep }

// Created returns the export's creation time.
func (p *Predictor) Created() time.Time { return p.md.Created }

// Predict computes every output from inputs, which must hold exactly the
// signature's inputs, each of its dtype and a shape the signature accepts.
// It blocks until the computation ends or ctx is done. The input tensors are
// read, never modified; the returned tensors belong to the caller. Errors
// wrap ErrBadInput (naming the input and, for a shape or dtype, what was
// given and what is wanted), ErrClosed, or the ctx error. Predict is safe for
// concurrent use.
func (p *Predictor) Predict(ctx context.Context, inputs map[string]*tensor.Tensor) (out map[string]*tensor.Tensor, err error) {
	if p.closed.Load() {
		return nil, fmt.Errorf("savedmodel: predict: %w", ErrClosed)
	}
	feeds, err := p.feeds(inputs)
	if err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("savedmodel: predict: panic: %v", r)
		}
	}()
	vals, err := p.sess.Run(ctx, feeds, p.outputs, nil)
	if err != nil {
		if errors.Is(err, session.ErrClosed) {
			return nil, fmt.Errorf("savedmodel: predict: %w", ErrClosed)
		}
		return nil, fmt.Errorf("savedmodel: predict: %w", err)
	}
	out = make(map[string]*tensor.Tensor, len(vals))
	for i, v := range vals {
		out[p.outName[i]] = v
	}
	return out, nil
}

// CheckInputs validates inputs as Predict does, without running anything.
func (p *Predictor) CheckInputs(inputs map[string]*tensor.Tensor) error {
	_, err := p.feeds(inputs)
	return err
}

func (p *Predictor) feeds(inputs map[string]*tensor.Tensor) (map[graph.Output]*tensor.Tensor, error) {
	feeds := make(map[graph.Output]*tensor.Tensor, len(inputs))
	for name, t := range inputs {
		o, ok := p.inputs[name]
		if !ok {
			return nil, fmt.Errorf("savedmodel: unknown input %q (the model's inputs are %s): %w", name, strings.Join(p.sig.InputNames(), ", "), ErrBadInput)
		}
		ti := p.sig.Inputs[name]
		switch {
		case t == nil:
			return nil, fmt.Errorf("savedmodel: input %q is nil: %w", name, ErrBadInput)
		case t.DType() != ti.DType:
			return nil, fmt.Errorf("savedmodel: input %q: dtype %v given, %v wanted: %w", name, t.DType(), ti.DType, ErrBadInput)
		case !ti.Shape.AcceptsDims(t.Shape()) || !o.Shape().AcceptsDims(t.Shape()):
			return nil, fmt.Errorf("savedmodel: input %q: shape %v given, %v wanted: %w", name, tensor.MakeShape(t.Shape()...), ti.Shape, ErrBadInput)
		}
		feeds[o] = t
	}
	if len(feeds) != len(p.inputs) {
		for _, name := range p.sig.InputNames() {
			if _, ok := inputs[name]; !ok {
				return nil, fmt.Errorf("savedmodel: missing input %q (%v%v): %w", name, p.sig.Inputs[name].DType, p.sig.Inputs[name].Shape, ErrBadInput)
			}
		}
	}
	return feeds, nil
}

// Close releases the predictor. Predictions in progress complete; later ones
// fail with ErrClosed. Close is idempotent.
func (p *Predictor) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	return p.sess.Close()
}
