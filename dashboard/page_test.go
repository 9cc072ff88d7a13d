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
// lost worker and a straggler are marked, and the graph is drawn.
func TestPage64(t *testing.T) {
	spec := fakeSpec(55, 8)
	d, fc, c := newFake(t, spec)
	d.SetGraph(fakeGraph(spec))
	srv := httptest.NewServer(d.Handler())
	// Closed after the browser (cleanups run last first): Close waits for
	// the page's event stream to end.
	t.Cleanup(srv.Close)
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
	shot(t, ctx, dir, "cluster64")
}

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
