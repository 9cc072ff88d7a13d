package localcluster_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/localcluster"
)

// TestMain runs the fake task program when this test binary was started by
// Run as a task of a test's cluster, a launcher when a test started it as
// one (see TestTasksDieWithTheLauncher), and the tests otherwise.
func TestMain(m *testing.M) {
	if localcluster.IsTask() {
		os.Exit(fakeTask(os.Args[1:]))
	}
	if os.Getenv("LCTEST_LAUNCHER") == "1" {
		os.Exit(fakeLauncher())
	}
	os.Exit(m.Run())
}

// fakeLauncher runs a ps=1,worker=2 cluster of serving tasks until it is
// killed.
func fakeLauncher() int {
	err := localcluster.Run(context.Background(), localcluster.Config{
		Jobs: localcluster.Jobs{PS: 1, Worker: 2},
		Args: []string{"serve"},
	})
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// fakeTask is the program of the tests' tasks. Every task checks that
// TF_CONFIG names it and that Listener is bound to its address, says hello
// on stdout and stderr, and serves one-line requests on its listener:
// "who" is answered with the task's name, GOMAXPROCS and start number (how
// many times this task started in the run's LCTEST_DIR), "quit" with "bye"
// and an exit 0, "die" with "dying", lines of output and an exit 4. It exits 0
// on SIGTERM. args[0], the mode, makes some tasks do more:
//
//	serve        nothing more
//	chief-fails  the chief exits 3
//	ps-crashes   ps 0 exits 1 (before serving) while it started no more than
//	             LCTEST_CRASHES times; the chief asks ps 0 "who", prints the
//	             answer and tells it to quit
//	worker-lost  the chief tells worker 1 to die, says so once it is gone,
//	             then tells ps 0 to quit
//	chief-crashes the chief exits 1 in its first life; in its second it
//	             asks worker 1 who it is, then tells worker 1 and ps 0 to quit
//	worker-crashes worker 1 exits 1 in its first life; the chief waits for
//	             its second, then tells it to quit (ps 0 lingers)
//	ps-lingers   the chief exits 0 at once
//	stubborn     worker 1 ignores SIGTERM
//	worker-lingers the chief tells ps 0 to quit and exits 0; worker 1
//	             serves on and, on SIGTERM, prints whether ps 0's address
//	             refuses a connection and exits 5
//	chatty       every task writes 500 lines on stdout and on stderr at once
//	             and exits 0
//	long         the chief writes a 3 MiB line on stderr, then
//	             "<512 KiB line>\nend\nno newline" on stdout, and exits 0
func fakeTask(args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "fake task: "+format+"\n", a...)
		return 90
	}
	if len(args) != 1 {
		return fail("args %q, want a mode", args)
	}
	mode := args[0]
	spec, self, ok, err := cluster.FromEnv()
	if err != nil || !ok {
		return fail("TF_CONFIG: %v (set: %v)", err, ok)
	}
	name := self.Job + " " + strconv.Itoa(self.Index)
	isChief := self.Job == "chief" || self.Job == "worker" && self.Index == 0 && !spec.HasJob("chief")
	onSigterm(mode, name, spec)
	lis, err := localcluster.Listener()
	if err != nil || lis == nil {
		return fail("Listener() = %v, %v", lis, err)
	}
	if addr, _ := spec.Address(self); lis.Addr().String() != addr {
		return fail("listening on %s, TF_CONFIG says %s", lis.Addr(), addr)
	}
	start := 1
	if dir := os.Getenv("LCTEST_DIR"); dir != "" {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return fail("%v", err)
		}
		f.Write([]byte{'.'})
		fi, _ := f.Stat()
		f.Close()
		start = int(fi.Size())
	}
	fmt.Println("hello from", name)
	fmt.Fprintln(os.Stderr, "hello from", name)
	code, done := 0, false
	switch {
	case mode == "chatty":
		code, done = chatty(name), true
	case isChief:
		code, done = chiefActs(mode, spec, start)
	default:
		code, done = otherActs(mode, name, start)
	}
	if done {
		return code
	}
	serve(lis, fmt.Sprintf("%s %d %d", name, runtime.GOMAXPROCS(0), start))
	return 0
}

// onSigterm sets how the task answers SIGTERM: it exits 0, or ignores it
// (stubborn's worker 1), or reports whether ps 0 refuses connections and
// exits 5 (worker-lingers' worker 1).
func onSigterm(mode, name string, spec *cluster.Spec) {
	switch {
	case mode == "stubborn" && name == "worker 1":
		signal.Ignore(syscall.SIGTERM)
	case mode == "worker-lingers" && name == "worker 1":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() {
			<-term
			c, err := net.DialTimeout("tcp", spec.Addresses("ps")[0], time.Second)
			if err == nil {
				c.Close()
			}
			fmt.Println("ps 0 refuses:", err != nil)
			os.Exit(5)
		}()
	default:
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() {
			<-term
			os.Exit(0)
		}()
	}
}

// chiefActs is what the chief does in mode before it serves; done says
// that it exits with code instead.
func chiefActs(mode string, spec *cluster.Spec, start int) (code int, done bool) {
	switch mode {
	case "chief-fails":
		fmt.Println("the chief's result")
		fmt.Fprintln(os.Stderr, "about to fail")
		return 6, true
	case "ps-crashes":
		ps := spec.Addresses("ps")[0]
		fmt.Println("ps answered:", ask(ps, "who"))
		ask(ps, "quit")
		return 0, true
	case "chief-crashes":
		// The chief dies in its first life; in its second it ends the run,
		// as a chief resumed from its checkpoint does.
		if start == 1 {
			fmt.Println("chief crashing (start 1)")
			return 1, true
		}
		fmt.Printf("chief again (start %d); worker 1 is %s\n", start, ask(spec.Addresses("worker")[1], "who"))
		ask(spec.Addresses("worker")[1], "quit")
		ask(spec.Addresses("ps")[0], "quit")
		return 0, true
	case "worker-crashes":
		// The chief asks until worker 1 answers in its second life.
		for !strings.HasSuffix(ask(spec.Addresses("worker")[1], "who"), " 2") {
			time.Sleep(10 * time.Millisecond) // a client's back-off
		}
		fmt.Println("worker 1 is back")
		ask(spec.Addresses("worker")[1], "quit")
		return 0, true
	case "worker-lost":
		ask(spec.Addresses("worker")[1], "die")
		fmt.Println("worker 1 is gone")
		ask(spec.Addresses("ps")[0], "quit")
		return 0, true
	case "worker-lost-chief-waits":
		// As worker-lost, but the chief goes on serving until it is
		// stopped: the launcher has handled worker 1's exit before any
		// of the chief's.
		ask(spec.Addresses("worker")[1], "die")
		fmt.Println("worker 1 is gone")
	case "ps-lingers":
		return 0, true
	case "worker-lingers":
		ask(spec.Addresses("ps")[0], "quit")
		return 0, true
	case "long":
		os.Stderr.WriteString(strings.Repeat("e", 3<<20) + "\n")
		os.Stdout.WriteString(strings.Repeat("o", 512<<10) + "\nend\nno newline")
		return 0, true
	}
	return 0, false
}

// otherActs is what a task other than the chief does in mode before it
// serves: ps 0 crashes in its first LCTEST_CRASHES lives (ps-crashes),
// worker 1 in its first (worker-crashes) or in every one, as a task whose
// own computation fails does (worker-fails-for-good).
func otherActs(mode, name string, start int) (code int, done bool) {
	switch {
	case mode == "ps-crashes" && name == "ps 0":
		crashes, _ := strconv.Atoi(os.Getenv("LCTEST_CRASHES"))
		if start <= crashes {
			fmt.Printf("ps 0 crashing (start %d)\n", start)
			return 1, true
		}
	case mode == "worker-crashes" && name == "worker 1" && start == 1:
		fmt.Println("worker 1 crashing (start 1)")
		return 1, true
	case mode == "worker-fails-for-good" && name == "worker 1":
		fmt.Printf("worker 1: a label out of range (start %d)\n", start)
		return localcluster.ExitPermanent, true
	}
	return 0, false
}

// chatty writes 500 lines on stdout and on stderr at once, in many writes
// that cut lines.
func chatty(name string) int {
	var wg sync.WaitGroup
	for _, f := range []*os.File{os.Stdout, os.Stderr} {
		wg.Go(func() {
			w := bufio.NewWriterSize(f, 100)
			for i := range 500 {
				fmt.Fprintf(w, "%s says %d on %s %s\n", name, i, f.Name(), strings.Repeat("=", i%70))
			}
			w.Flush()
		})
	}
	wg.Wait()
	return 0
}

// serve answers requests (see fakeTask) until an exit request.
func serve(lis net.Listener, who string) {
	for {
		c, err := lis.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake task: accept:", err)
			os.Exit(91)
		}
		go func() {
			req, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				c.Close()
				return
			}
			switch strings.TrimSpace(req) {
			case "who":
				fmt.Fprintln(c, who)
				c.Close()
			case "quit":
				fmt.Fprintln(c, "bye")
				os.Exit(0)
			case "die":
				for i := range 200 {
					fmt.Printf("%s dying, line %d\n", who, i)
				}
				fmt.Fprintln(c, "dying")
				os.Exit(4)
			}
		}()
	}
}

// ask sends a request to addr and returns the answer; for "quit" and "die",
// it returns once the task closed the connection (as it exits). It tries
// again until it has an answer: a restarting task drops the connections
// queued before it started (see Listener).
func ask(addr, req string) string {
	for {
		if answer, ok := askOnce(addr, req); ok {
			return answer
		}
		time.Sleep(10 * time.Millisecond) // a client's back-off, not synchronisation
	}
}

func askOnce(addr, req string) (string, bool) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return "", false
	}
	defer c.Close()
	if _, err := fmt.Fprintln(c, req); err != nil {
		return "", false
	}
	r := bufio.NewReader(c)
	answer, err := r.ReadString('\n')
	if err != nil {
		return "", false
	}
	if req == "quit" || req == "die" {
		r.WriteTo(discard{})
	}
	return strings.TrimSpace(answer), true
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
