package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestScheduleIsAPureFunctionOfTheSeed(t *testing.T) {
	w := Window{From: time.Second, To: 8 * time.Second}
	a, err := Schedule(42, "ps=1,worker=2", 20, w, time.Second, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Schedule(42, "ps=1,worker=2", 20, w, time.Second, 3*time.Second)
	c, _ := Schedule(43, "ps=1,worker=2", 20, w, time.Second, 3*time.Second)
	if !slices.Equal(a, b) {
		t.Errorf("the same seed gave two schedules:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 42 and 43 gave the same schedule %v", a)
	}
	kinds, targets := map[Kind]int{}, map[Task]int{}
	for i, f := range a {
		if f.At < w.From || f.At > w.To || (i > 0 && f.At < a[i-1].At) {
			t.Errorf("fault %d at %v: outside %v or not sorted", i, f.At, w)
		}
		if f.Kind == Stop && (f.Pause < time.Second || f.Pause > 3*time.Second) {
			t.Errorf("fault %d pauses %v, outside [1s, 3s]", i, f.Pause)
		}
		if f.Kind == Kill && f.Pause != 0 {
			t.Errorf("kill %d has a pause %v", i, f.Pause)
		}
		kinds[f.Kind]++
		targets[f.Target]++
	}
	if len(kinds) != 2 || len(targets) != 3 {
		t.Errorf("20 faults used kinds %v and targets %v: want both kinds and all 3 tasks", kinds, targets)
	}
}

func TestScheduleRejectsBadInput(t *testing.T) {
	w := Window{From: time.Second, To: 2 * time.Second}
	for _, tc := range []struct {
		cluster  string
		n        int
		w        Window
		min, max time.Duration
		want     string
	}{
		{"ps=x", 1, w, time.Second, time.Second, "not job=count"},
		{"ps=0", 1, w, time.Second, time.Second, "no tasks"},
		{"ps=1", -1, w, time.Second, time.Second, "want 0 or more"},
		{"ps=1", 1, Window{From: 2 * time.Second, To: time.Second}, time.Second, time.Second, "window"},
		{"ps=1", 1, w, 0, time.Second, "pause"},
	} {
		_, err := Schedule(1, tc.cluster, tc.n, tc.w, tc.min, tc.max)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Schedule(%q, %d, %v, %v, %v): err = %v, want one saying %q", tc.cluster, tc.n, tc.w, tc.min, tc.max, err, tc.want)
		}
	}
}

func TestNamesTask(t *testing.T) {
	w1 := Task{Job: "worker", Index: 1}
	for _, tc := range []struct {
		line string
		want bool
	}{
		{"local cluster: worker 1 died (signal: killed); restarting it", true},
		{`[worker 0] level=WARN msg="peer lost" peer=/job:worker/task:1`, true},
		{`[ps 0] level=WARN msg="no answer" from=127.0.0.1:4242`, true},
		{`[worker 0] level=WARN msg=x peer=worker:1`, true},
		{"local cluster: worker 10 died", false},
		{`[worker 0] level=WARN peer=/job:worker/task:12`, false},
		{`[worker 1] level=WARN msg="lost ps" peer=/job:worker/task:1`, false}, // its own line
		{`[worker 0] level=WARN msg="lost" peer=/job:ps/task:1`, false},
	} {
		if got := namesTask(tc.line, w1, "127.0.0.1:4242"); got != tc.want {
			t.Errorf("namesTask(%q) = %v, want %v", tc.line, got, tc.want)
		}
	}
}

func TestFirstNoticeAndProgress(t *testing.T) {
	lines := []Line{
		{At: 1 * time.Second, Text: "[worker 0] /job:worker/task:0: local_step 100  global_step 250/1600"},
		{At: 2 * time.Second, Text: `[worker 1] level=INFO msg=x peer=/job:ps/task:0`}, // not a warning
		{At: 3 * time.Second, Text: "[worker 0] /job:worker/task:0: local_step 200  global_step 480/1600"},
		{At: 4 * time.Second, Text: "local cluster: ps 0 died (signal: killed); restarting it on its address (1 of 3)"},
		{At: 5 * time.Second, Text: `[worker 0] level=INFO msg="checkpoint: restored" prefix=model.ckpt-400`},
		{At: 6 * time.Second, Text: "[worker 0] /job:worker/task:0: local_step 300  global_step 520/1600"},
		{At: 7 * time.Second, Text: `[worker 0] level=INFO msg="checkpoint: restored" prefix=model.ckpt-500`},
		{At: 7 * time.Second, Text: "[worker 2] /job:worker/task:2: step 510/534  epoch 0.75  loss 1.1193  (3 ranks)"},
		{At: 7 * time.Second, Text: `[worker 1] level=WARN msg="lost a task" err="master: step 8845343541833870390 in session \"s3v\""`},
		{At: 8 * time.Second, Text: `{"global_step":1600,"test_accuracy":0.85}`},
	}
	for _, l := range []struct {
		text string
		want bool
	}{
		{"supervisor: ps 0 died (signal: killed); restarting it with the same flags (1 of 5)", true},
		{"supervisor: worker 1 still runs 10s after the chief ended training; stopping it", true},
		{"supervisor: started ps 0 (pid 12)", false},
		{"supervisor: ps 0 exited 0", false},
	} {
		if got := noticeLine(l.text); got != l.want {
			t.Errorf("noticeLine(%q) = %v, want %v", l.text, got, l.want)
		}
	}
	ps0 := Task{Job: "ps", Index: 0}
	l, ok := firstNotice(lines, 1500*time.Millisecond, ps0, "")
	if !ok || l.At != 4*time.Second {
		t.Errorf("firstNotice = %v, %v; want the launcher's line at 4s", l, ok)
	}
	if _, ok := firstNotice(lines, 4500*time.Millisecond, ps0, ""); ok {
		t.Error("firstNotice after the only notice found one")
	}
	maxStep, lost, worst := progress(lines)
	if maxStep != 520 || lost != 80+20 || worst != 80 {
		t.Errorf("progress = %d, %d, %d; want 520, 100, 80", maxStep, lost, worst)
	}
	if got := targetSteps(append(lines,
		Line{Text: `[worker 0] level=INFO msg=training task=/job:worker/task:0 strategy=async replica=0 replicas=2 global_steps=1600 batch=100`},
		Line{Text: `[worker 1] level=INFO msg=training task=/job:worker/task:1 strategy=allreduce rank=1 ranks=3 steps=534 batch=100 first_step=1`})); got != 1600 {
		t.Errorf("targetSteps = %d, want 1600", got)
	}
	r, ok := lastResult(lines)
	if !ok || r.GlobalStep != 1600 || r.TestAccuracy != 0.85 {
		t.Errorf("lastResult = %+v, %v", r, ok)
	}
}

func TestLookupStrategy(t *testing.T) {
	for _, name := range StrategyNames() {
		s, err := LookupStrategy(name)
		if err != nil || s.Name != name {
			t.Errorf("LookupStrategy(%q) = %v, %v", name, s, err)
		}
		if _, err := tasks(s.Cluster); err != nil {
			t.Errorf("strategy %s: %v", name, err)
		}
	}
	if _, err := LookupStrategy("ring"); err == nil || !strings.Contains(err.Error(), "allreduce") {
		t.Errorf("LookupStrategy(ring): err = %v, want one listing the strategies", err)
	}
}

func TestParsePlan(t *testing.T) {
	got, err := ParsePlan("stop:ps0@3.5s+2s, kill:worker1@2s")
	want := []Fault{
		{At: 2 * time.Second, Kind: Kill, Target: Task{"worker", 1}},
		{At: 3500 * time.Millisecond, Kind: Stop, Target: Task{"ps", 0}, Pause: 2 * time.Second},
	}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("ParsePlan = %v, %v; want %v", got, err, want)
	}
	// Events keep the order written: each waits for the one before.
	got, err = ParsePlan("stop:worker0@step:300+5s,kill:ps0@step:900,kill:worker0@file:training_ended,kill:worker1@1s")
	want = []Fault{
		{AtStep: 300, Kind: Stop, Target: Task{"worker", 0}, Pause: 5 * time.Second},
		{AtStep: 900, Kind: Kill, Target: Task{"ps", 0}},
		{OnFile: "training_ended", Kind: Kill, Target: Task{"worker", 0}},
		{At: time.Second, Kind: Kill, Target: Task{"worker", 1}},
	}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("ParsePlan with events = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"", "kill:worker1", "crash:worker1@1s", "kill:worker@1s", "stop:ps0@1s", "kill:ps0@1s+1s", "kill:ps0@-1s", "stop:ps0@1s+0s",
		"kill:ps0@step:0", "kill:ps0@step:x", "kill:ps0@file:", "kill:ps0@file:[", "stop:ps0@step:10"} {
		if _, err := ParsePlan(bad); err == nil || !strings.Contains(err.Error(), "want kill:TASK@AT") {
			t.Errorf("ParsePlan(%q): err = %v, want one showing the form", bad, err)
		}
	}
}

func TestSummarize(t *testing.T) {
	kill := FaultResult{Fault: Fault{Kind: Kill}, Applied: true, Noticed: true, NoticeAfter: 2 * time.Second}
	quiet := FaultResult{Fault: Fault{Kind: Stop}, Applied: true}
	results := []*Result{
		{Strategy: "sync", Finished: true, Accuracy: 0.84},
		{Strategy: "sync", Finished: true, Accuracy: 0.86},
		{Strategy: "sync", Finished: true, Accuracy: 0.845, CleanAccuracy: 0.85, LostSteps: 7, Faults: []FaultResult{kill, quiet}},
		{Strategy: "sync", Hung: true, CleanAccuracy: 0.85, Faults: []FaultResult{kill}, LeftBehind: []string{"ps 0 (pid 1)"}},
		{Strategy: "sync", Finished: true, Accuracy: 0.8, CleanAccuracy: 0.85, Faults: []FaultResult{quiet}, Corrupt: []string{"x"}},
	}
	got := Summarize(results)
	want := Summary{Strategy: "sync", Runs: 3, Finished: 2, Hung: 1, WithinPoint: 1, MeanDeltaPt: (-0.5 - 5) / 2,
		LostSteps: 7, Faults: 4, Noticed: 2, MaxNotice: 2 * time.Second, Corrupt: 1, LeftBehind: 1,
		CleanAcc: 0.85, CleanRuns: 2, CleanMin: 0.84, CleanMax: 0.86}
	if len(got) != 1 {
		t.Fatalf("Summarize gave %d summaries, want 1", len(got))
	}
	g := got[0]
	if d := g.MeanDeltaPt - want.MeanDeltaPt; d > 1e-9 || d < -1e-9 {
		t.Errorf("MeanDeltaPt = %v, want %v", g.MeanDeltaPt, want.MeanDeltaPt)
	}
	g.MeanDeltaPt = want.MeanDeltaPt
	if g != want {
		t.Errorf("Summarize =\n %+v\nwant\n %+v", g, want)
	}
	for i, r := range results[2:] {
		if r.OK(0.01) != (i == 0) {
			t.Errorf("fault run %d: OK = %v", i, r.OK(0.01))
		}
	}
}

func TestTimeBoundLimit(t *testing.T) {
	stop := FaultResult{Fault: Fault{Kind: Stop, Pause: 3 * time.Second}, Applied: true}
	notApplied := FaultResult{Fault: Fault{Kind: Stop, Pause: 4 * time.Second}}
	kill := FaultResult{Fault: Fault{Kind: Kill}, Applied: true}
	for _, tc := range []struct {
		b      TimeBound
		clean  time.Duration
		faults []FaultResult
		want   time.Duration
	}{
		{TimeBound{}, 5 * time.Second, nil, 25 * time.Second},
		{TimeBound{}, 5 * time.Second, []FaultResult{stop, notApplied, kill}, 28 * time.Second},
		{TimeBound{Factor: 2, Slack: time.Second}, 4 * time.Second, []FaultResult{kill}, 9 * time.Second},
		{TimeBound{}, 0, []FaultResult{stop}, 0},
		{TimeBound{Factor: -1}, 5 * time.Second, nil, 0},
	} {
		if got := tc.b.Limit(tc.clean, tc.faults); got != tc.want {
			t.Errorf("%+v.Limit(%v, %d faults) = %v, want %v", tc.b, tc.clean, len(tc.faults), got, tc.want)
		}
	}
}

func TestCheckpointInterval(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int64
	}{
		{nil, 0},
		{[]string{"--save-checkpoint-steps", "100"}, 100},
		{[]string{"--save-checkpoint-steps", "100", "--save-checkpoint-steps=50"}, 50},
		{[]string{"--save-checkpoint-steps"}, 0},
	} {
		if got := checkpointInterval(tc.args); got != tc.want {
			t.Errorf("checkpointInterval(%q) = %d; want %d", tc.args, got, tc.want)
		}
	}
}
