package cluster

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/distflow/distflow/internal/suggest"
)

// The keys of TF_CONFIG, by what distflow does with them.
var (
	// tfRead: read by FromTFConfig.
	tfRead = []string{"cluster", "task"}
	// tfQuiet: TensorFlow's, ignored on purpose and without a warning:
	// distflow has one environment and one RPC layer.
	tfQuiet = []string{"environment", "rpc_layer"}
	// tfIgnored: TensorFlow Estimator's; a user may expect them to act,
	// so ignoring them is worth a warning.
	tfIgnored = []string{"model_dir", "session_master", "eval_session_master", "service"}
	// taskRead and taskQuiet: the same for the keys of "task" ("trial" is
	// a hyper-parameter tuning trial's id, which distflow has no use for).
	taskRead  = []string{"type", "index"}
	taskQuiet = []string{"trial"}
	// tfJobs are TensorFlow's job names; a cluster job close to one of them
	// is probably a typo.
	tfJobs = []string{"chief", "worker", "ps", "evaluator", "master"}
)

// TFConfigWarnings returns one line for each thing in the TF_CONFIG
// document js that distflow accepts but probably is not what the author
// meant, in document order: an unknown key at the top level or in "task"
// (with the nearest known key when one is close), a key spelt with other
// capitals (read, as encoding/json matches keys without case, but
// TensorFlow would not read it), a key given twice (the last one counts), a
// TensorFlow Estimator key distflow ignores ("model_dir", ...), and a job
// name close to one of TensorFlow's ("wroker"). Each line starts with
// "TF_CONFIG: ". It returns nil for a document without warnings and for one
// that is not a JSON object (FromTFConfig reports that). It never panics.
func TFConfigWarnings(js string) []string {
	top, ok := objectFields([]byte(js))
	if !ok {
		return nil
	}
	var ws []string
	ws = append(ws, fieldWarnings("", top, tfRead, tfQuiet, tfIgnored)...)
	if task, ok := lastField(top, "task"); ok {
		if fs, ok := objectFields(task); ok {
			ws = append(ws, fieldWarnings("task.", fs, taskRead, taskQuiet, nil)...)
		}
	}
	if cl, ok := lastField(top, "cluster"); ok {
		if fs, ok := objectFields(cl); ok {
			for _, f := range fs {
				if m := suggest.Nearest(f.name, tfJobs); m != "" && !slices.Contains(tfJobs, f.name) {
					ws = append(ws, fmt.Sprintf("TF_CONFIG: job %q in \"cluster\" is not one of TensorFlow's (%s): did you mean %q?", f.name, strings.Join(tfJobs, ", "), m))
				}
			}
		}
	}
	return ws
}

// fieldWarnings checks the keys of one object; prefix ("task.") says where
// it is.
func fieldWarnings(prefix string, fs []field, read, quiet, ignored []string) []string {
	known := append(append(append([]string(nil), read...), quiet...), ignored...)
	var quoted []string
	for _, r := range read {
		quoted = append(quoted, fmt.Sprintf("%q", prefix+r))
	}
	reads := strings.Join(quoted, " and ")
	var ws []string
	seen := map[string]int{}
	for _, f := range fs {
		seen[f.name]++
		if seen[f.name] == 2 {
			ws = append(ws, fmt.Sprintf("TF_CONFIG: field %q appears more than once; the last one is used", prefix+f.name))
		}
		if seen[f.name] > 1 {
			continue
		}
		switch {
		case slices.Contains(read, f.name) || slices.Contains(quiet, f.name):
		case slices.Contains(ignored, f.name):
			ws = append(ws, fmt.Sprintf("TF_CONFIG: field %q is TensorFlow Estimator's; distflow ignores it", prefix+f.name))
		case foldIndex(read, f.name) >= 0:
			r := read[foldIndex(read, f.name)]
			ws = append(ws, fmt.Sprintf("TF_CONFIG: field %q is read as %q, but TensorFlow would not read it: write %q", prefix+f.name, prefix+r, prefix+r))
		default:
			hint := ""
			if m := suggest.Nearest(f.name, known); m != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", prefix+m)
			}
			ws = append(ws, fmt.Sprintf("TF_CONFIG: unknown field %q%s; distflow reads %s", prefix+f.name, hint, reads))
		}
	}
	return ws
}

// misspelling explains a missing key want of the object at path parent (""
// for the top level, "task") when the document has a key that is probably
// it misspelt; otherwise it returns fallback.
func misspelling(js, parent, want, fallback string) string {
	fs, ok := objectFields([]byte(js))
	if !ok {
		return fallback
	}
	known := append(append(append([]string(nil), tfRead...), tfQuiet...), tfIgnored...)
	if parent != "" {
		v, ok := lastField(fs, parent)
		if !ok {
			return fallback
		}
		if fs, ok = objectFields(v); !ok {
			return fallback
		}
		known = append(append([]string(nil), taskRead...), taskQuiet...)
	}
	for _, f := range fs {
		if !slices.Contains(known, f.name) && suggest.Nearest(strings.ToLower(f.name), known) == want {
			return fmt.Sprintf("(there is a field %q: did you mean %q?)", f.name, want)
		}
	}
	return fallback
}

// didYouMean returns ` (did you mean "x"?)` for the name in names nearest to
// name, or "".
func didYouMean(name string, names []string) string {
	if m := suggest.Nearest(name, names); m != "" {
		return fmt.Sprintf(" (did you mean %q?)", m)
	}
	return ""
}

// field is one key of a JSON object and its undecoded value.
type field struct {
	name  string
	value json.RawMessage
}

// objectFields returns the keys of the JSON object doc in document order,
// repeated keys included; ok is false when doc is not an object.
func objectFields(doc []byte) (fs []field, ok bool) {
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		fs = append(fs, field{name, v})
	}
	return fs, true
}

// lastField returns the value of the last key that encoding/json would
// decode into the field name (which matches keys without case).
func lastField(fs []field, name string) (json.RawMessage, bool) {
	for i := len(fs) - 1; i >= 0; i-- {
		if strings.EqualFold(fs[i].name, name) {
			return fs[i].value, true
		}
	}
	return nil, false
}

// foldIndex returns the index of the element of list equal to s without
// case, or -1.
func foldIndex(list []string, s string) int {
	return slices.IndexFunc(list, func(x string) bool { return strings.EqualFold(x, s) })
}
