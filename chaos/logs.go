package chaos

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Line is one line of the launcher's output, with when the harness read it
// (from the launcher's start).
type Line struct {
	At     time.Duration
	Stderr bool
	Text   string
}

// noticeLine reports whether line is one that tells of a failure: the
// launcher's own lines ("local cluster: ...", or a hand-started cluster's
// supervisor's, "supervisor: ...") and slog warnings and errors
// of any task. Progress lines and informational records are not.
func noticeLine(text string) bool {
	if rest, ok := strings.CutPrefix(text, "supervisor: "); ok {
		// The supervisor's news of a start or a clean exit tells of no
		// failure.
		return !strings.HasPrefix(rest, "started ") && !strings.HasSuffix(rest, " exited 0")
	}
	return strings.HasPrefix(text, "local cluster: ") || strings.Contains(text, "level=WARN") || strings.Contains(text, "level=ERROR")
}

// namesTask reports whether text names task t: "worker 1", "/job:worker/task:1",
// "worker:1", or its address. A line that t wrote itself ("[worker 1] ...")
// does not count: a task does not notice its own loss.
func namesTask(text string, t Task, addr string) bool {
	if strings.HasPrefix(text, "["+t.String()+"] ") {
		return false
	}
	if addr != "" && strings.Contains(text, addr) {
		return true
	}
	for _, form := range []string{t.String(), "/job:" + t.Job + "/task:" + strconv.Itoa(t.Index), t.Job + ":" + strconv.Itoa(t.Index)} {
		for i := 0; ; {
			j := strings.Index(text[i:], form)
			if j < 0 {
				break
			}
			end := i + j + len(form)
			if end == len(text) || text[end] < '0' || text[end] > '9' {
				return true
			}
			i = end
		}
	}
	return false
}

// firstNotice returns the first line at or after at that tells of a failure
// and names t.
func firstNotice(lines []Line, at time.Duration, t Task, addr string) (Line, bool) {
	for _, l := range lines {
		if l.At >= at && noticeLine(l.Text) && namesTask(l.Text, t, addr) {
			return l, true
		}
	}
	return Line{}, false
}

var (
	// "global_step 250/1600" (ps strategies), "global_step=250" (records),
	// "step 250/534" (all-reduce, where every rank counts the same steps).
	// Not "step 8845343541833870390 in session": a step's id.
	globalStepRe = regexp.MustCompile(`global_step[ =](\d+)|\bstep (\d+)/`)
	restoredRe   = regexp.MustCompile(`restored.*ckpt-(\d+)`)
)

// progress returns the highest global step the lines show, and the steps
// lost: on each restore from a checkpoint, how far below the highest step
// seen so far it went back (in all, and the most by one restore).
func progress(lines []Line) (maxStep, lost, worst int64) {
	for _, l := range lines {
		if m := restoredRe.FindStringSubmatch(l.Text); m != nil {
			if s, err := strconv.ParseInt(m[1], 10, 64); err == nil && s < maxStep {
				lost += maxStep - s
				worst = max(worst, maxStep-s)
			}
			continue
		}
		if m := globalStepRe.FindStringSubmatch(l.Text); m != nil {
			if s, err := strconv.ParseInt(m[1]+m[2], 10, 64); err == nil && s > maxStep {
				maxStep = s
			}
		}
	}
	return maxStep, lost, worst
}

// targetRe finds the steps a run trains to in a task's "training" record:
// global_steps=1600 (ps strategies) or steps=534 (all-reduce).
var targetRe = regexp.MustCompile(`msg=training .*\b(?:global_)?steps=(\d+)`)

// targetSteps returns the highest step target the tasks announced, or 0.
func targetSteps(lines []Line) int64 {
	var target int64
	for _, l := range lines {
		if m := targetRe.FindStringSubmatch(l.Text); m != nil {
			if s, err := strconv.ParseInt(m[1], 10, 64); err == nil {
				target = max(target, s)
			}
		}
	}
	return target
}

// trainResult is the part of `distflow train --json` output the harness
// reads.
type trainResult struct {
	GlobalStep   int64   `json:"global_step"`
	TestAccuracy float64 `json:"test_accuracy"`
	Strategy     string  `json:"strategy"`
}

// lastResult parses the last stdout line that is a JSON object.
func lastResult(lines []Line) (trainResult, bool) {
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if l.Stderr || !strings.HasPrefix(l.Text, "{") {
			continue
		}
		var r trainResult
		if json.Unmarshal([]byte(l.Text), &r) == nil {
			return r, true
		}
	}
	return trainResult{}, false
}

// waitingFor summarises what a hung run was waiting for: its last notice
// lines and lines that say "waiting", newest last, at most n.
func waitingFor(lines []Line, n int) []string {
	var out []string
	for i := len(lines) - 1; i >= 0 && len(out) < n; i-- {
		t := lines[i].Text
		if noticeLine(t) || strings.Contains(t, "waiting") {
			out = append(out, t)
		}
	}
	if len(out) == 0 && len(lines) > 0 {
		out = append(out, lines[len(lines)-1].Text)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}
