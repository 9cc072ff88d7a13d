package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"time"
)

// Defaults of a hand-started cluster's supervisor.
const (
	// superviseBackoff is how long the supervisor waits before restarting
	// a task that died (Kubernetes backs off from 10 s; shorter here, so
	// that a restart fits in a run of seconds).
	superviseBackoff = 200 * time.Millisecond
	// superviseRestarts is how many times a task is restarted before the
	// supervisor gives up on it (Kubernetes' CrashLoopBackOff goes on for
	// ever, with longer waits).
	superviseRestarts = 5
	// superviseGrace is how long the other tasks may run after the chief
	// has exited 0 before the supervisor stops them (SIGKILL), as the
	// launcher's EndGrace does.
	superviseGrace = 10 * time.Second
)

// handStarted starts every task of the strategy's cluster by itself, with
// TF_CONFIG naming its task and the train flags args, each under a
// supervisor that restarts it with the same flags when it dies (exit
// status not 0, or a signal), as Kubernetes restarts a pod's container
// (restartPolicy OnFailure), whatever the strategy would have a launcher
// restart. Each task binds its own address (free loopback ports, chosen
// here), so that a dead task's address refuses connections, as a
// container's does. The run ends when the chief (worker 0) has exited 0
// and the others have exited or been stopped after superviseGrace; its
// error is the chief's last failure when the supervisor gave up on it.
// The returned channel receives that error once every task is gone;
// cancel ctx to kill them all.
func (r *runner) handStarted(ctx context.Context, args []string) (<-chan error, error) {
	ts, err := tasks(r.cfg.Strategy.Cluster)
	if err != nil {
		return nil, err
	}
	addrs, err := freeAddrs(len(ts))
	if err != nil {
		return nil, err
	}
	clusterSpec := map[string][]string{}
	for i, t := range ts {
		clusterSpec[t.Job] = append(clusterSpec[t.Job], addrs[i])
	}
	chiefDone := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	var chiefErr error
	for _, t := range ts {
		tfConfig, err := json.Marshal(map[string]any{"cluster": clusterSpec, "task": map[string]any{"type": t.Job, "index": t.Index}})
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.supervise(ctx, t, args, string(tfConfig), chiefDone)
			if t == (Task{Job: "worker", Index: 0}) {
				chiefErr = err
				once.Do(func() { close(chiefDone) })
			}
		}()
	}
	done := make(chan error, 1)
	go func() {
		wg.Wait()
		done <- chiefErr
	}()
	return done, nil
}

// supervise runs task t until it exits 0, restarting it when it dies,
// until the chief has ended (chiefDone closed; then it is not restarted,
// and stopped after superviseGrace) or ctx ends. It returns the task's
// last error when it gave up.
func (r *runner) supervise(ctx context.Context, t Task, args []string, tfConfig string, chiefDone <-chan struct{}) error {
	for restarts := 0; ; restarts++ {
		cmd := exec.Command(r.cfg.Binary, args...)
		cmd.Env = append(os.Environ(), EnvMarker+"="+r.id, "TF_CONFIG="+tfConfig)
		cmd.Dir = r.dir
		cmd.SysProcAttr = launcherAttr()
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			r.linef("supervisor: %s could not start: %v", t, err)
			return err
		}
		r.linef("supervisor: started %s (pid %d)", t, cmd.Process.Pid)
		var readers sync.WaitGroup
		readers.Add(2)
		prefix := "[" + t.String() + "] "
		chief := t == (Task{Job: "worker", Index: 0})
		// The chief's result (stdout) unprefixed, as the launcher prints it.
		go r.readPrefixed(stdout, false, map[bool]string{true: "", false: prefix}[chief], &readers)
		go r.readPrefixed(stderr, true, prefix, &readers)
		exited := make(chan error, 1)
		go func() {
			readers.Wait()
			exited <- cmd.Wait()
		}()
		var err2 error
		select {
		case err2 = <-exited:
		case <-ctx.Done():
			killGroup(cmd.Process.Pid)
			<-exited
			return ctx.Err()
		case <-chiefDone:
			if chief {
				err2 = <-exited
				break
			}
			grace := time.NewTimer(superviseGrace)
			select {
			case err2 = <-exited:
				grace.Stop()
			case <-grace.C:
				r.linef("supervisor: %s still runs %v after the chief ended training; stopping it", t, superviseGrace)
				killGroup(cmd.Process.Pid)
				<-exited
				return nil
			case <-ctx.Done():
				grace.Stop()
				killGroup(cmd.Process.Pid)
				<-exited
				return ctx.Err()
			}
		}
		if err2 == nil {
			r.linef("supervisor: %s exited 0", t)
			return nil
		}
		select {
		case <-chiefDone:
			r.linef("supervisor: %s exited after the chief ended training (%v); not restarting it", t, err2)
			return nil
		default:
		}
		if restarts >= superviseRestarts {
			r.linef("supervisor: %s died (%v); giving up after %d restarts", t, err2, restarts)
			return fmt.Errorf("%s: %w", t, err2)
		}
		r.linef("supervisor: %s died (%v); restarting it with the same flags (%d of %d)", t, err2, restarts+1, superviseRestarts)
		backoff := time.NewTimer(superviseBackoff)
		select {
		case <-backoff.C:
		case <-ctx.Done():
			backoff.Stop()
			return ctx.Err()
		}
	}
}

// freeAddrs returns n loopback addresses free now (the ports the kernel
// gave listeners that are then closed). Another process may take one
// before the task binds it; on loopback, in a test, that is rare.
func freeAddrs(n int) ([]string, error) {
	var out []string
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, errors.Join(errors.New("chaos: finding a free port"), err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().String())
	}
	return out, nil
}
