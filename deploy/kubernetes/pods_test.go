package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
)

// TestIndexedJobsRun runs indexed-jobs.yaml's pods as Kubernetes would,
// without Kubernetes: each pod in a network namespace of its own (joined by
// a bridge in another, 10.78.0.0/24, nothing in the machine's namespace),
// its host name and its peers' resolved by a hosts file for that namespace
// (/etc/netns/NS/hosts, which `ip netns exec` mounts as /etc/hosts), with
// the manifest's environment and arguments plus JOB_COMPLETION_INDEX, the
// certificates made by the README's command and copied as the init
// container does. Training is cut to a few steps. Every pod must exit 0:
// the chief and the workers at the last step, the ps when the chief ends
// training, so that every Job would complete. Root only (network
// namespaces); skipped otherwise.
func TestIndexedJobsRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
	type pod struct {
		job          *batchv1.Job
		index        int
		name, ns, ip string
	}
	var pods []pod
	prefix := fmt.Sprintf("dfk8s%d", os.Getpid()%100000)
	for _, d := range readDocs(t, "indexed-jobs.yaml") {
		if d.meta.Kind != "Job" {
			continue
		}
		j := new(batchv1.Job)
		decodeStrict(t, d, j)
		for i := range int(*j.Spec.Completions) {
			k := len(pods)
			pods = append(pods, pod{job: j, index: i, name: fmt.Sprintf("%s-%d", j.Name, i),
				ns: fmt.Sprintf("%s-%d", prefix, k), ip: fmt.Sprintf("10.78.0.%d", 10+k)})
		}
	}
	dir := t.TempDir()
	bin := distflowBinary(t)
	sh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	hub := prefix + "-hub"
	t.Cleanup(func() {
		for _, p := range pods {
			exec.Command("ip", "netns", "del", p.ns).Run()
			os.RemoveAll(filepath.Join("/etc/netns", p.ns))
		}
		exec.Command("ip", "netns", "del", hub).Run()
		os.Remove("/etc/netns") // only if empty: it may be someone else's
	})
	sh("netns", "add", hub)
	sh("-n", hub, "link", "add", "br0", "type", "bridge")
	sh("-n", hub, "link", "set", "br0", "up")
	var hosts strings.Builder
	for _, p := range pods {
		// The pod's host name, and its name under the Service.
		fmt.Fprintf(&hosts, "%s %s.%s %s\n", p.ip, p.name, p.job.Spec.Template.Spec.Subdomain, p.name)
	}
	for k, p := range pods {
		sh("netns", "add", p.ns)
		sh("-n", p.ns, "link", "set", "lo", "up")
		sh("link", "add", "eth0", "netns", p.ns, "type", "veth", "peer", "name", fmt.Sprintf("v%d", k), "netns", hub)
		sh("-n", p.ns, "addr", "add", p.ip+"/24", "dev", "eth0")
		sh("-n", p.ns, "link", "set", "eth0", "up")
		sh("-n", hub, "link", "set", fmt.Sprintf("v%d", k), "master", "br0", "up")
		if err := os.MkdirAll(filepath.Join("/etc/netns", p.ns), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("/etc/netns", p.ns, "hosts"), []byte("127.0.0.1 localhost\n"+hosts.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The README's certificates: every task's address as TF_CONFIG has it.
	addrs := map[string][]string{}
	for _, p := range pods {
		task := p.job.Labels["distflow.dev/job"]
		addrs[task] = append(addrs[task], p.name+"."+p.job.Spec.Template.Spec.Subdomain+":2222")
	}
	secret := filepath.Join(dir, "secret")
	certs := exec.Command(bin, "certs", "create", "--dir", secret, "--chief_hosts="+strings.Join(addrs["chief"], ","),
		"--worker_hosts="+strings.Join(addrs["worker"], ","), "--ps_hosts="+strings.Join(addrs["ps"], ","))
	if out, err := certs.CombinedOutput(); err != nil {
		t.Fatalf("distflow certs create: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	type result struct {
		out, errOut bytes.Buffer
		err         error
	}
	results := make([]*result, len(pods))
	var wg sync.WaitGroup
	for k, p := range pods {
		// The init container: the Secret but ca.key, keys 0600.
		podCerts := filepath.Join(dir, p.name)
		if err := os.Mkdir(podCerts, 0o700); err != nil {
			t.Fatal(err)
		}
		files, _ := filepath.Glob(filepath.Join(secret, "*"))
		for _, f := range files {
			if filepath.Base(f) == "ca.key" {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(podCerts, filepath.Base(f)), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		c := container(t, p.name, p.job.Spec.Template.Spec, "distflow")
		var args []string
		for _, a := range c.Args {
			switch {
			case a == "--certs-dir=/certs":
				a = "--certs-dir=" + podCerts
			case strings.HasPrefix(a, "--checkpoint-dir="):
				a = "--checkpoint-dir=" + filepath.Join(dir, p.name+"-ckpt")
			}
			args = append(args, a)
		}
		args = append(args, "--steps=20", "--quiet")
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", p.ns, bin}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
		for k, v := range envOf(c, p.index) {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		r := &result{}
		results[k] = r
		cmd.Stdout, cmd.Stderr = &r.out, &r.errOut
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); r.err = cmd.Wait() }()
	}
	wg.Wait()
	for k, p := range pods {
		r := results[k]
		if r.err != nil {
			t.Errorf("pod %s: %v\nstdout: %s\nstderr: %s", p.name, r.err, r.out.String(), r.errOut.String())
			continue
		}
		t.Logf("pod %s exited 0: %s", p.name, strings.TrimSpace(r.out.String()))
	}
	chief := results[0]
	if pods[0].job.Labels["distflow.dev/job"] != "chief" || !strings.Contains(chief.out.String(), "global step 20") {
		t.Errorf("the chief (%s) did not report 20 steps: %q", pods[0].name, chief.out.String())
	}
}
