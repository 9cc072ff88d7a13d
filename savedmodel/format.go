package savedmodel

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/distflow/distflow/tensor"
)

// Sentinel errors, wrapped by the errors of this package.
var (
	// ErrNotFound: the directory, or a version in it, does not exist.
	ErrNotFound = errors.New("savedmodel: not found")
	// ErrIncomplete: the directory is half-written or damaged (metadata
	// missing or invalid, a file missing, truncated or failing its checksum).
	ErrIncomplete = errors.New("savedmodel: incomplete or corrupt export")
	// ErrUnsupported: the export has a format version or content this build
	// does not understand.
	ErrUnsupported = errors.New("savedmodel: unsupported export")
	// ErrBadInput: a Predict call's inputs do not match the signature.
	ErrBadInput = errors.New("savedmodel: bad input")
	// ErrClosed: Predict on a closed Predictor.
	ErrClosed = errors.New("savedmodel: predictor is closed")
	// ErrExist: Write's destination already exists.
	ErrExist = errors.New("savedmodel: destination exists")
)

// FormatVersion is the version of the layout this build writes and reads.
const FormatVersion = 1

const (
	formatName    = "distflow.savedmodel"
	metadataFile  = "model.json"
	graphFile     = "graph.pb"
	variablesFile = "variables.bin"
	varsMagic     = "DFVARS\x00\x01"

	// Bounds on what Load reads: a model.json larger than maxMetadataBytes or
	// another file larger than maxFileBytes is refused before it is read.
	maxMetadataBytes = 1 << 20
	maxFileBytes     = 4 << 30
	maxVariables     = 1 << 20
	maxNameLen       = 4096
)

// TensorInfo describes one named input or output of a signature.
type TensorInfo struct {
	Name  string       // graph tensor name ("images:0")
	DType tensor.DType // element type
	Shape tensor.Shape // -1 for an unknown dimension; unknown rank allowed
}

// Signature lists a model's named inputs and outputs.
type Signature struct {
	Inputs, Outputs map[string]TensorInfo
}

// InputNames returns the input names, sorted.
func (s Signature) InputNames() []string { return sortedKeys(s.Inputs) }

// OutputNames returns the output names, sorted.
func (s Signature) OutputNames() []string { return sortedKeys(s.Outputs) }

func sortedKeys(m map[string]TensorInfo) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Metadata is the content of model.json.
type Metadata struct {
	Format        string              `json:"format"`
	FormatVersion int                 `json:"format_version"`
	GlobalStep    int64               `json:"global_step"`
	Created       time.Time           `json:"created"`
	Signature     jsonSignature       `json:"signature"`
	Files         map[string]FileInfo `json:"files"`
}

// FileInfo is the recorded size and SHA-256 (hex) of a file of the export.
type FileInfo struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

type jsonSignature struct {
	Inputs  map[string]jsonTensorInfo `json:"inputs"`
	Outputs map[string]jsonTensorInfo `json:"outputs"`
}

type jsonTensorInfo struct {
	Name  string `json:"name"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"` // nil: unknown rank
}

var (
	sigNameRE = regexp.MustCompile(`^[A-Za-z0-9_.\-/]{1,256}$`)
	sha256RE  = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

func toJSONSignature(s Signature) jsonSignature {
	conv := func(m map[string]TensorInfo) map[string]jsonTensorInfo {
		out := make(map[string]jsonTensorInfo, len(m))
		for k, ti := range m {
			out[k] = jsonTensorInfo{Name: ti.Name, DType: ti.DType.String(), Shape: ti.Shape.Dims()}
		}
		return out
	}
	return jsonSignature{Inputs: conv(s.Inputs), Outputs: conv(s.Outputs)}
}

func fromJSONSignature(js jsonSignature) (Signature, error) {
	conv := func(what string, m map[string]jsonTensorInfo) (map[string]TensorInfo, error) {
		if len(m) == 0 {
			return nil, fmt.Errorf("the signature has no %s", what)
		}
		out := make(map[string]TensorInfo, len(m))
		for k, ji := range m {
			if !sigNameRE.MatchString(k) {
				return nil, fmt.Errorf("%s name %q: want 1 to 256 of [A-Za-z0-9_.-/]", what, k)
			}
			dt, err := tensor.ParseDType(ji.DType)
			if err != nil {
				return nil, fmt.Errorf("%s %q: %w", what, k, err)
			}
			if ji.Name == "" || len(ji.Name) > maxNameLen {
				return nil, fmt.Errorf("%s %q: bad tensor name %q", what, k, ji.Name)
			}
			shape := tensor.UnknownShape()
			if ji.Shape != nil {
				if len(ji.Shape) > 64 {
					return nil, fmt.Errorf("%s %q: rank %d is too large", what, k, len(ji.Shape))
				}
				for _, d := range ji.Shape {
					if d < -1 || d > 1<<31 {
						return nil, fmt.Errorf("%s %q: bad dimension %d in shape %v", what, k, d, ji.Shape)
					}
				}
				shape = tensor.MakeShape(ji.Shape...)
			}
			out[k] = TensorInfo{Name: ji.Name, DType: dt, Shape: shape}
		}
		return out, nil
	}
	in, err := conv("input", js.Inputs)
	if err != nil {
		return Signature{}, err
	}
	out, err := conv("output", js.Outputs)
	if err != nil {
		return Signature{}, err
	}
	return Signature{Inputs: in, Outputs: out}, nil
}

// ParseMetadata decodes and validates model.json. Errors wrap ErrIncomplete
// (not a valid metadata file) or ErrUnsupported (a format or version this
// build does not read).
func ParseMetadata(b []byte) (*Metadata, Signature, error) {
	if len(b) > maxMetadataBytes {
		return nil, Signature{}, fmt.Errorf("savedmodel: %s is %d bytes, more than the %d allowed: %w", metadataFile, len(b), maxMetadataBytes, ErrIncomplete)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Metadata
	if err := dec.Decode(&m); err != nil {
		return nil, Signature{}, fmt.Errorf("savedmodel: decoding %s: %v: %w", metadataFile, err, ErrIncomplete)
	}
	if dec.More() {
		return nil, Signature{}, fmt.Errorf("savedmodel: %s has data after its JSON object: %w", metadataFile, ErrIncomplete)
	}
	if m.Format != formatName {
		return nil, Signature{}, fmt.Errorf("savedmodel: %s: format %q, want %q: %w", metadataFile, m.Format, formatName, ErrUnsupported)
	}
	if m.FormatVersion != FormatVersion {
		return nil, Signature{}, fmt.Errorf("savedmodel: %s: format version %d, this build reads version %d (upgrade distflow or re-export the model): %w", metadataFile, m.FormatVersion, FormatVersion, ErrUnsupported)
	}
	for _, name := range []string{graphFile, variablesFile} {
		fi, ok := m.Files[name]
		if !ok {
			return nil, Signature{}, fmt.Errorf("savedmodel: %s does not list %s: %w", metadataFile, name, ErrIncomplete)
		}
		if fi.Size < 0 || fi.Size > maxFileBytes {
			return nil, Signature{}, fmt.Errorf("savedmodel: %s: size %d of %s is out of range [0, %d]: %w", metadataFile, fi.Size, name, int64(maxFileBytes), ErrIncomplete)
		}
		if !sha256RE.MatchString(fi.SHA256) {
			return nil, Signature{}, fmt.Errorf("savedmodel: %s: checksum of %s is not 64 lower-case hex digits: %w", metadataFile, name, ErrIncomplete)
		}
	}
	if len(m.Files) != 2 {
		return nil, Signature{}, fmt.Errorf("savedmodel: %s lists %d files, want exactly %s and %s: %w", metadataFile, len(m.Files), graphFile, variablesFile, ErrIncomplete)
	}
	sig, err := fromJSONSignature(m.Signature)
	if err != nil {
		return nil, Signature{}, fmt.Errorf("savedmodel: %s: %v: %w", metadataFile, err, ErrIncomplete)
	}
	return &m, sig, nil
}

// encodeVariables encodes vars in name order.
func encodeVariables(vars map[string]*tensor.Tensor) ([]byte, error) {
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	slices.Sort(names)
	buf := append([]byte(nil), varsMagic...)
	buf = binary.AppendUvarint(buf, uint64(len(names)))
	for _, name := range names {
		enc, err := vars[name].MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("savedmodel: encoding variable %q: %w", name, err)
		}
		buf = binary.AppendUvarint(buf, uint64(len(name)))
		buf = append(buf, name...)
		buf = binary.AppendUvarint(buf, uint64(len(enc)))
		buf = append(buf, enc...)
	}
	return buf, nil
}

// decodeVariables decodes variables.bin; every length is checked against
// what remains, so hostile input cannot make it allocate more than len(b).
func decodeVariables(b []byte) (map[string]*tensor.Tensor, error) {
	if !bytes.HasPrefix(b, []byte(varsMagic)) {
		return nil, fmt.Errorf("%s does not start with the magic %q", variablesFile, varsMagic)
	}
	b = b[len(varsMagic):]
	count, n := binary.Uvarint(b)
	if n <= 0 || count > maxVariables || count > uint64(len(b)) {
		return nil, fmt.Errorf("%s: bad variable count", variablesFile)
	}
	b = b[n:]
	next := func(what string) ([]byte, error) {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, fmt.Errorf("%s: %s: bad or truncated length", variablesFile, what)
		}
		v := b[n : n+int(l)]
		b = b[n+int(l):]
		return v, nil
	}
	out := make(map[string]*tensor.Tensor, count)
	for i := range count {
		name, err := next(fmt.Sprintf("name of variable %d", i))
		if err != nil {
			return nil, err
		}
		if len(name) == 0 || len(name) > maxNameLen {
			return nil, fmt.Errorf("%s: variable %d: bad name length %d", variablesFile, i, len(name))
		}
		enc, err := next(fmt.Sprintf("value of variable %q", name))
		if err != nil {
			return nil, err
		}
		if _, dup := out[string(name)]; dup {
			return nil, fmt.Errorf("%s: variable %q appears twice", variablesFile, name)
		}
		t := new(tensor.Tensor)
		if err := t.UnmarshalBinary(enc); err != nil {
			return nil, fmt.Errorf("%s: variable %q: %w", variablesFile, name, err)
		}
		out[string(name)] = t
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%s: %d bytes after the last variable", variablesFile, len(b))
	}
	return out, nil
}
