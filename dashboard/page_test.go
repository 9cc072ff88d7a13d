package dashboard

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/distflow/distflow/internal/browser"
)

// TestPage64 opens the page of a fake cluster of 64 tasks in headless
// Chromium: every task gets a card, the step counter follows the polls, a
// lost worker and a straggler are marked, the graph is drawn, and each
// task shows its devices. Then a small cluster, whose cards show their
// details, shows each device in full.
func TestPage64(t *testing.T) {
	spec := fakeSpec(55, 8)
	d, fc, c := newFake(t, spec)
	d.SetGraph(fakeGraph(spec))
	fc.task(spec["worker"][0]).devices = fakeGPUs
	srv := httptest.NewServer(d.Handler())
	// Closed after the browser (cleanups run last first): Close waits for
	// the page's event stream to end.
	t.Cleanup(srv.Close)
	small := fakeSpec(2, 1)
	ds, fs, _ := newFake(t, small)
	fs.task(small["worker"][1]).devices = fakeGPUs
	srvSmall := httptest.NewServer(ds.Handler())
	t.Cleanup(srvSmall.Close)
	bctx := browser.Start(t, 1400, 1000)
	dir := browser.ScreenshotDir(t)
	ctx, cancel := context.WithTimeout(bctx, 30*time.Second)
	defer cancel()

	pctx := context.Background()
	d.Poll(pctx)
	for range 20 {
		fc.step(10, 0.02)
		c.add(time.Second)
		d.Poll(pctx)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.querySelectorAll(".task").length === 64 && document.getElementById("global-step").textContent === "200"`)
	fc.task(spec["worker"][3]).alive = false
	for range 5 {
		fc.step(10, 0.02, spec["worker"][7])
		fc.step(2, 0.05)
		c.add(time.Second)
		d.Poll(pctx)
	}
	waitJS(t, ctx, `document.querySelector('[data-task="/job:worker/task:3"]').dataset.state === "lost" &&
		document.querySelector('[data-task="/job:worker/task:7"]').dataset.state === "straggler" &&
		document.querySelector("#graph svg") !== null && document.getElementById("global-step").textContent === "260"`)
	// Which task runs a node: the search names it.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const e = document.getElementById("graph-search");
		e.value = "layer0/W"; e.dispatchEvent(new Event("input")); return true })()`)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `document.getElementById("graph-find").textContent.includes("layer0/W (Variable) on /job:ps/task:0")`)
	// Small cards name the devices and tell their memory on hover.
	waitJS(t, ctx, `(() => { const g = document.querySelector('[data-task="/job:worker/task:0"] .devs');
		return g.textContent === "2× GPU 12.3 MiB" && g.title === `+"`"+fakeGPUText+"`"+` &&
			document.querySelector('[data-task="/job:ps/task:0"] .devs').textContent === "CPU" })()`)
	shot(t, ctx, dir, "cluster64")

	ds.Poll(pctx)
	if err := chromedp.Do(ctx, chromedp.Navigate(srvSmall.URL)); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `(() => { const card = (n) => document.querySelector('[data-task="' + n + '"] .devs');
		return document.querySelectorAll(".task:not(.compact)").length === 4 &&
			card("/job:worker/task:1").innerText === `+"`"+fakeGPUText+"`"+` &&
			card("/job:worker/task:0").innerText === "CPU" && card("/job:chief/task:0").innerText === "CPU" })()`)
	shot(t, ctx, dir, "devices")
}

// fakeGPUs are two simulated accelerators, one busy and one idle, and
// fakeGPUText is how the page writes them, a line each.
var (
	fakeGPUs = []DeviceMemory{
		{Name: "GPU:0", Platform: "sim", InUse: mib(12.3), Peak: mib(40.1), Limit: mib(921.6)},
		{Name: "GPU:1", Platform: "sim", Card: 0, Logical: 3, Limit: mib(921.6)},
	}
	fakeGPUText = "GPU:0 (sim, card 0, logical GPU 0) 12.3 MiB in use, peak 40.1 MiB of 921.6 MiB\n" +
		"GPU:1 (sim, card 0, logical GPU 3) 0 B in use, peak 0 B of 921.6 MiB"
)

func mib(v float64) int64 { return int64(v*(1<<20) + 0.5) }

// waitJS waits until expr is true in the page.
func waitJS(t *testing.T, ctx context.Context, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText.slice(0, 2000)`))
		t.Fatalf("waiting for %s: %v\npage:\n%s", expr, err, html)
	}
}

func shot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	p, err := browser.Screenshot(ctx, dir, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", p)
}

// fakeGraph is a small replicated model: variables on the ps tasks, a
// tower per worker.
func fakeGraph(spec map[string][]string) *Graph {
	g := &Graph{}
	add := func(name, op, task string, inputs ...string) {
		g.Nodes = append(g.Nodes, Node{Name: name, Op: op, Task: task, Inputs: inputs})
	}
	for i := range spec["ps"][:2] {
		ps := fmt.Sprintf("/job:ps/task:%d", i)
		add(fmt.Sprintf("layer%d/W", i), "Variable", ps)
		add(fmt.Sprintf("layer%d/b", i), "Variable", ps)
	}
	add("global_step", "Variable", "/job:ps/task:0")
	w := "/job:chief/task:0"
	add("input/x", "Placeholder", w)
	add("input/y", "Placeholder", w)
	add("layer0/MatMul", "MatMul", w, "input/x", "layer0/W")
	add("layer0/Add", "Add", w, "layer0/MatMul", "layer0/b")
	add("layer0/Relu", "Relu", w, "layer0/Add")
	add("layer1/MatMul", "MatMul", w, "layer0/Relu", "layer1/W")
	add("layer1/Add", "Add", w, "layer1/MatMul", "layer1/b")
	add("loss/xent", "SoftmaxCrossEntropy", w, "layer1/Add", "input/y")
	add("loss/Mean", "Mean", w, "loss/xent")
	add("gradients/l1", "MatMul", w, "loss/Mean", "layer1/Add")
	add("gradients/l0", "MatMul", w, "gradients/l1", "layer0/Relu")
	add("train/apply0", "ApplyGradientDescent", "/job:ps/task:0", "layer0/W", "gradients/l0")
	add("train/apply1", "ApplyGradientDescent", "/job:ps/task:1", "layer1/W", "gradients/l1")
	add("train/step", "AssignAdd", "/job:ps/task:0", "global_step", "train/apply0", "train/apply1")
	return g
}
