package ringstate

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distflow/distflow/allreduce"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/*.trace")

// TestTraces replays each testdata/*.trace (a config line, then one event
// a line, at a time in milliseconds) and compares the events and the
// actions the machine emitted with testdata/*.golden; -update rewrites
// the golden files.
func TestTraces(t *testing.T) {
	traces, err := filepath.Glob("testdata/*.trace")
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) == 0 {
		t.Fatal("no traces in testdata")
	}
	for _, path := range traces {
		name := strings.TrimSuffix(filepath.Base(path), ".trace")
		t.Run(name, func(t *testing.T) {
			got, err := replay(path)
			if err != nil {
				t.Fatal(err)
			}
			golden := strings.TrimSuffix(path, ".trace") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from %s (go test -update rewrites it):\n%s", path, golden, diff(string(want), got))
			}
		})
	}
}

// replay runs the trace at path and returns the golden text: each line
// of the trace, followed by the actions its event produced.
func replay(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var (
		out strings.Builder
		m   *Machine
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		out.WriteString(line + "\n")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if fields[0] == "config" {
			cfg, err := parseConfig(fields[1:])
			if err != nil {
				return "", fmt.Errorf("%s:%d: %w", path, n, err)
			}
			if m, err = New(cfg); err != nil {
				return "", fmt.Errorf("%s:%d: %w", path, n, err)
			}
			continue
		}
		if m == nil {
			return "", fmt.Errorf("%s:%d: an event before the config line", path, n)
		}
		ms, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || len(fields) < 2 {
			return "", fmt.Errorf("%s:%d: want <ms> <event>, got %q", path, n, line)
		}
		ev, err := parseEvent(fields[1], fields[2:])
		if err != nil {
			return "", fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if ev.String() != strings.Join(fields[1:], " ") {
			return "", fmt.Errorf("%s:%d: the event reads back as %q: write it so", path, n, ev.String())
		}
		wasEnded := m.Ended()
		acts := m.Step(time.UnixMilli(ms), ev)
		if len(acts) == 0 && !wasEnded && isAnswer(ev) {
			// A trace that answers what the machine did not ask is wrong
			// (a generation that is not the view's, a step not in flight).
			return "", fmt.Errorf("%s:%d: %q answers nothing the machine waits for; the trace so far:\n%s", path, n, line, out.String())
		}
		for _, a := range acts {
			out.WriteString("  -> " + a.String() + "\n")
		}
	}
	return out.String(), sc.Err()
}

func parseConfig(args []string) (Config, error) {
	var c Config
	for _, kv := range args {
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("config %s: %w", kv, err)
		}
		switch k {
		case "rank":
			c.Rank = int(n)
		case "ranks":
			c.Ranks = int(n)
		case "steps":
			c.Steps = n
		case "lost_after":
			c.LostAfter = time.Duration(n) * time.Millisecond
		case "wait_timeout":
			c.WaitTimeout = time.Duration(n) * time.Millisecond
		case "servers":
			c.Servers = n != 0
		default:
			return c, fmt.Errorf("config: unknown %q", k)
		}
	}
	return c, nil
}

// args are an event's key=value arguments and flags.
type args struct {
	kv    map[string]string
	flags map[string]bool
	pos   []string
}

func parseArgs(fields []string) args {
	a := args{kv: map[string]string{}, flags: map[string]bool{}}
	for _, f := range fields {
		if k, v, ok := strings.Cut(f, "="); ok {
			a.kv[k] = v
		} else if _, err := strconv.Atoi(f); err == nil {
			a.pos = append(a.pos, f)
		} else {
			a.flags[f] = true
		}
	}
	return a
}

func (a args) int(k string) int64 {
	n, _ := strconv.ParseInt(a.kv[k], 10, 64)
	return n
}

func (a args) rank() int {
	if len(a.pos) == 0 {
		return -1
	}
	n, _ := strconv.Atoi(a.pos[0])
	return n
}

func parseRanks(s string) []int {
	if s == "" || s == "none" {
		return nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

func (a args) failure() Failure {
	_, down := a.kv["down"]
	return Failure{PeerDown: down, Down: parseRanks(a.kv["down"]), Notice: a.flags["notice"], Mismatch: a.flags["mismatch"], Fatal: a.flags["fatal"]}
}

func parseEvent(name string, fields []string) (Event, error) {
	a := parseArgs(fields)
	switch name {
	case "start":
		return Start{Done: a.int("done")}, nil
	case "lost":
		return PeerLost{Rank: a.rank()}, nil
	case "alive":
		return PeerAlive{Rank: a.rank()}, nil
	case "answered":
		return Answered{Rank: a.rank()}, nil
	case "view":
		return ViewReceived{View: allreduce.View{Gen: a.int("gen"), Step: a.int("step"), Members: parseRanks(a.kv["members"]),
			Sync: a.flags["sync"], Stop: a.flags["stop"], RingOnly: a.flags["ringonly"]}}, nil
	case "sent":
		return ViewSent{Gen: a.int("gen"), Failed: a.flags["failed"], Missing: parseRanks(a.kv["missing"])}, nil
	case "left":
		return MemberLeft{Gen: a.int("gen"), Rank: a.rank()}, nil
	case "ended":
		return Ended{Yes: a.flags["yes"]}, nil
	case "marker":
		return MarkerSeen{}, nil
	case "servers":
		return ServersProbed{Down: a.flags["down"]}, nil
	case "synced":
		return Synced{Done: a.int("done")}, nil
	case "sync-failed":
		return SyncFailed{a.failure()}, nil
	case "trained":
		return Trained{Step: a.int("step"), Stop: a.flags["stop"]}, nil
	case "step-failed":
		return StepFailed{Step: a.int("step"), Failure: a.failure()}, nil
	case "finished":
		return Finished{Failed: a.flags["failed"]}, nil
	case "tick":
		return Tick{}, nil
	case "views-closed":
		return ViewsClosed{}, nil
	}
	return nil, fmt.Errorf("unknown event %q", name)
}

// isAnswer reports whether ev answers an action: the machine always acts
// on an answer it waits for.
func isAnswer(ev Event) bool {
	switch ev.(type) {
	case ViewSent, Ended, ServersProbed, Synced, SyncFailed, Trained, StepFailed, Finished:
		return true
	}
	return false
}

// diff shows the first lines where want and got differ.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  want %q\n  got  %q", i+1, wl, gl)
		}
	}
	return "(no difference)"
}
