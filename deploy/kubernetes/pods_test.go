package kubernetes

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// pod is one pod of a manifest, to run in a network namespace.
type pod struct {
	name  string   // the pod's host name
	names []string // the names its peers reach it by
	task  string   // its job: chief, worker, ps
	c     corev1.Container
	env   map[string]string // the container's environment as the cluster sets it
	init  corev1.Container  // the init container that copies the pod's certificates
	// initEnv is the init container's environment as the cluster sets it
	// (JOB_COMPLETION_INDEX, the pod's labels through the downward API).
	initEnv map[string]string
}

// TestIndexedJobsRun runs indexed-jobs.yaml's pods as Kubernetes would
// (see runPods): every pod must exit 0, the chief and the workers at the
// last step, the ps when the chief ends training, so that every Job would
// complete. Root only; skipped otherwise.
func TestIndexedJobsRun(t *testing.T) {
	var pods []pod
	for _, d := range readDocs(t, "indexed-jobs.yaml") {
		if d.meta.Kind != "Job" {
			continue
		}
		j := new(batchv1.Job)
		decodeStrict(t, d, j)
		c := container(t, j.Name, j.Spec.Template.Spec, "distflow")
		init := initContainer(t, j.Name, j.Spec.Template.Spec)
		for i := range int(*j.Spec.Completions) {
			name := fmt.Sprintf("%s-%d", j.Name, i)
			pods = append(pods, pod{name: name, names: []string{name + "." + j.Spec.Template.Spec.Subdomain},
				task: j.Labels["distflow.dev/job"], c: c, env: envOf(c, i), init: init, initEnv: podEnv(t, init, i, nil)})
		}
	}
	runPods(t, pods)
}

// TestTFJobRun runs tfjob.yaml's pods with TF_CONFIG as the v1 operator
// writes it (namespace default; each pod reached as NAME-TYPE-I.default.svc)
// and the certificates of the README's TFJob command (see runPods).
func TestTFJobRun(t *testing.T) {
	job := new(kubeflowv1.TFJob)
	decodeStrict(t, readDocs(t, "tfjob.yaml")[0], job)
	kubeflowv1.SetDefaults_TFJob(job)
	job.Namespace = "default"
	var pods []pod
	for _, rt := range []kubeflowv1.ReplicaType{kubeflowv1.TFJobReplicaTypeChief, kubeflowv1.TFJobReplicaTypeWorker, kubeflowv1.TFJobReplicaTypePS} {
		spec := job.Spec.TFReplicaSpecs[rt]
		c := container(t, string(rt), spec.Template.Spec, kubeflowv1.TFJobDefaultContainerName)
		init := initContainer(t, string(rt), spec.Template.Spec)
		task := strings.ToLower(string(rt))
		for i := range int(*spec.Replicas) {
			env := envOf(c, i)
			delete(env, "JOB_COMPLETION_INDEX")
			env["TF_CONFIG"] = operatorTFConfig(t, job, rt, i)
			name := fmt.Sprintf("%s-%s-%d", job.Name, task, i)
			// The labels the operator gives the pod (lower-case type).
			labels := map[string]string{kubeflowv1.ReplicaTypeLabel: task, kubeflowv1.ReplicaIndexLabel: strconv.Itoa(i)}
			initEnv := podEnv(t, init, i, labels)
			delete(initEnv, "JOB_COMPLETION_INDEX")
			pods = append(pods, pod{name: name, names: []string{name + "." + job.Namespace + ".svc"}, task: task, c: c, env: env, init: init, initEnv: initEnv})
		}
	}
	runPods(t, pods)
}

// runPods runs pods as a cluster would, without one: each pod in a network
// namespace of its own (joined by a bridge in another, 10.78.0.0/24;
// nothing in the machine's namespace), its names and its peers' resolved by
// a hosts file for that namespace (/etc/netns/NS/hosts, which `ip netns
// exec` mounts as /etc/hosts), with its container's environment and
// arguments, and the certificates `distflow certs create` makes for the
// names its peers use, in a directory as in the Secret (all but ca.key),
// from which the pod's init container's own command (runInit) copies the
// pod's files: each pod must get its own key and no other. Training is cut to 20 steps. Every pod must exit 0 and the first
// (the chief) report 20 steps. Root only; skipped otherwise.
func runPods(t *testing.T, pods []pod) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip (iproute2)")
	}
	prefix := fmt.Sprintf("dfk8s%d", os.Getpid()%100000)
	ns := func(k int) string { return fmt.Sprintf("%s-%d", prefix, k) }
	ip := func(k int) string { return fmt.Sprintf("10.78.0.%d", 10+k) }
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
		for k := range pods {
			exec.Command("ip", "netns", "del", ns(k)).Run()
			os.RemoveAll(filepath.Join("/etc/netns", ns(k)))
		}
		exec.Command("ip", "netns", "del", hub).Run()
		os.Remove("/etc/netns") // only if empty: it may be someone else's
	})
	sh("netns", "add", hub)
	sh("-n", hub, "link", "add", "br0", "type", "bridge")
	sh("-n", hub, "link", "set", "br0", "up")
	var hosts strings.Builder
	addrs := map[string][]string{}
	for k, p := range pods {
		fmt.Fprintf(&hosts, "%s %s %s\n", ip(k), strings.Join(p.names, " "), p.name)
		addrs[p.task] = append(addrs[p.task], p.names[0]+":2222")
	}
	for k := range pods {
		sh("netns", "add", ns(k))
		sh("-n", ns(k), "link", "set", "lo", "up")
		sh("link", "add", "eth0", "netns", ns(k), "type", "veth", "peer", "name", fmt.Sprintf("v%d", k), "netns", hub)
		sh("-n", ns(k), "addr", "add", ip(k)+"/24", "dev", "eth0")
		sh("-n", ns(k), "link", "set", "eth0", "up")
		sh("-n", hub, "link", "set", fmt.Sprintf("v%d", k), "master", "br0", "up")
		if err := os.MkdirAll(filepath.Join("/etc/netns", ns(k)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("/etc/netns", ns(k), "hosts"), []byte("127.0.0.1 localhost\n"+hosts.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(dir, "secret")
	certs := exec.Command(bin, "certs", "create", "--dir", secret, "--chief_hosts="+strings.Join(addrs["chief"], ","),
		"--worker_hosts="+strings.Join(addrs["worker"], ","), "--ps_hosts="+strings.Join(addrs["ps"], ","))
	if out, err := certs.CombinedOutput(); err != nil {
		t.Fatalf("distflow certs create: %v\n%s", err, out)
	}
	if err := os.Remove(filepath.Join(secret, "ca.key")); err != nil { // kept out of the Secret
		t.Fatal(err)
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
		podCerts := filepath.Join(dir, p.name)
		if err := os.Mkdir(podCerts, 0o700); err != nil {
			t.Fatal(err)
		}
		runInit(t, p, secret, podCerts)
		var args []string
		for _, a := range p.c.Args {
			if a == "--certs-dir=/certs" {
				a = "--certs-dir=" + podCerts
			}
			args = append(args, a)
		}
		args = append(args, "--steps=20", "--quiet")
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns(k), bin}, args...)...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + dir}
		for k, v := range p.env {
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
	if pods[0].task != "chief" || !strings.Contains(results[0].out.String(), "global step 20") {
		t.Errorf("the chief (%s) did not report 20 steps: %q", pods[0].name, results[0].out.String())
	}
}

// runInit runs the pod's init container's command with sh, its volumes
// mounted at the test's directories (certs-secret: secret, certs:
// podCerts; the paths in the command replaced), and checks that it copied
// the pod's own files alone: ca.crt, TASK.INDEX.crt and .key, the key
// 0600.
func runInit(t *testing.T, p pod, secret, podCerts string) {
	t.Helper()
	if len(p.init.Command) != 3 || p.init.Command[0] != "sh" || p.init.Command[1] != "-c" {
		t.Fatalf("pod %s: init container command %q; want sh -c SCRIPT", p.name, p.init.Command)
	}
	mounts := map[string]string{"certs-secret": secret, "certs": podCerts}
	script := p.init.Command[2]
	for _, m := range p.init.VolumeMounts {
		dir, ok := mounts[m.Name]
		if !ok {
			t.Fatalf("pod %s: the init container mounts %s, which the test does not know", p.name, m.Name)
		}
		script = strings.ReplaceAll(script, m.MountPath+"/", dir+"/")
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	for k, v := range p.initEnv {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pod %s: init container: %v\n%s", p.name, err, out)
	}
	own := p.task + "." + p.name[strings.LastIndex(p.name, "-")+1:]
	entries, err := os.ReadDir(podCerts)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if want := []string{"ca.crt", own + ".crt", own + ".key"}; !slices.Equal(got, want) {
		t.Errorf("pod %s got %v from its init container; want %v (its own key alone)", p.name, got, want)
	}
	if st, err := os.Stat(filepath.Join(podCerts, own+".key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("pod %s: its key: %v, %v; want mode 0600", p.name, st, err)
	}
}
