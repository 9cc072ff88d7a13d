package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressLine matches the estimator's progress lines (estimator/loop.go),
// also as a local cluster prefixes them ("[worker 0] ").
var progressLine = regexp.MustCompile(`global_step (\d+)/(\d+)(?:\s+epoch ([\d.]+))?\s+loss ([-\d.eE+naNIf]+).*?\s([\d.]+) examples/s`)

// progressOutput returns where training's progress lines go: a progress
// bar on w when w is a terminal (steps, epoch, examples/s, ETA, loss),
// else w itself, as plain lines. Lines that are not progress pass through
// above the bar; the bar ends with the last step.
func progressOutput(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) || os.Getenv("TERM") == "dumb" {
		return w
	}
	return newProgressBar(w)
}

// barWriter turns progress lines into a progress bar, and writes every
// other line above it.
type barWriter struct {
	w   io.Writer
	mu  sync.Mutex
	bar *progressbar.ProgressBar
	max int64
	buf []byte
	who string // the prefix of the lines the bar follows
}

func newProgressBar(w io.Writer) *barWriter { return &barWriter{w: w} }

func (b *barWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	for {
		i := bytes.IndexByte(b.buf, '\n')
		if i < 0 {
			break
		}
		line := string(b.buf[:i])
		b.buf = b.buf[i+1:]
		b.line(line)
	}
	return len(p), nil
}

// line shows one line: a progress line moves the bar, another is printed
// above it.
func (b *barWriter) line(line string) {
	m := progressLine.FindStringSubmatch(line)
	if m != nil {
		// With -v a local cluster shows every worker's progress: the bar
		// follows the first task it hears from (the chief), the others'
		// lines are printed.
		who, _, _ := strings.Cut(line, "local_step")
		if b.who == "" {
			b.who = who
		}
		if who != b.who {
			m = nil
		}
	}
	if m == nil {
		if b.bar != nil {
			_ = b.bar.Clear()
		}
		fmt.Fprintln(b.w, line)
		if b.bar != nil {
			_ = b.bar.RenderBlank()
		}
		return
	}
	step, _ := strconv.ParseInt(m[1], 10, 64)
	target, _ := strconv.ParseInt(m[2], 10, 64)
	desc := "loss " + m[4] + "  " + m[5] + " ex/s"
	if m[3] != "" {
		desc = "epoch " + m[3] + "  " + desc
	}
	if b.bar == nil || target != b.max {
		if b.bar != nil {
			_ = b.bar.Finish()
			fmt.Fprintln(b.w)
		}
		b.max = target
		b.bar = progressbar.NewOptions64(target,
			progressbar.OptionSetWriter(b.w),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("steps"),
			progressbar.OptionShowIts(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionThrottle(0),
		)
	}
	b.bar.Describe(desc)
	_ = b.bar.Set64(min(step, target))
	if step >= target {
		_ = b.bar.Finish()
		fmt.Fprintln(b.w)
		b.bar, b.max = nil, 0
	}
}
