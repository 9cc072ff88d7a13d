package kubernetes

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/santhosh-tekuri/jsonschema/v6"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/distflow/distflow/cluster"
)

// doc is one YAML document of a manifest file.
type doc struct {
	file string
	raw  []byte
	meta metav1.TypeMeta
}

func (d doc) String() string { return d.file + ": " + d.meta.Kind }

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

// readDocs splits a manifest into its documents, skipping empty ones.
func readDocs(t *testing.T, file string) []doc {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []doc
	for _, part := range docSep.Split(string(b), -1) {
		js, err := yaml.YAMLToJSONStrict([]byte(part))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if string(js) == "null" {
			continue
		}
		d := doc{file: file, raw: []byte(part)}
		if err := json.Unmarshal(js, &d.meta); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		out = append(out, d)
	}
	return out
}

// decodeStrict decodes a document into a typed API object, refusing
// unknown and duplicate fields as `kubectl apply --validate=strict` does.
func decodeStrict(t *testing.T, d doc, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(d.raw, into); err != nil {
		t.Fatalf("%s: %v", d, err)
	}
}

// podTemplateSchema is the JSON schema of a PodTemplateSpec, taken from the
// TFJob CRD (training-operator v1.8.1, built against Kubernetes 1.29) and
// made strict: an object schema with properties admits no other property
// unless it says x-kubernetes-preserve-unknown-fields.
type schemas struct {
	tfjob, podTemplate *jsonschema.Schema
}

func loadSchemas(t *testing.T) schemas {
	t.Helper()
	f, err := os.Open("testdata/kubeflow.org_tfjobs.yaml.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 || crd.Spec.Versions[0].Name != "v1" {
		t.Fatalf("the CRD has versions %+v, want v1 alone", crd.Spec.Versions)
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	strict(root)
	// metadata is the API server's: the CRD leaves it open.
	root["properties"].(map[string]any)["metadata"] = map[string]any{"type": "object"}
	tmpl := dig(t, root, "properties", "spec", "properties", "tfReplicaSpecs", "additionalProperties", "properties", "template")
	c := jsonschema.NewCompiler()
	if err := c.AddResource("tfjob.json", root); err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("podtemplate.json", tmpl); err != nil {
		t.Fatal(err)
	}
	var s schemas
	if s.tfjob, err = c.Compile("tfjob.json"); err != nil {
		t.Fatal(err)
	}
	if s.podTemplate, err = c.Compile("podtemplate.json"); err != nil {
		t.Fatal(err)
	}
	return s
}

// strict closes every object schema that lists its properties.
func strict(v any) {
	switch v := v.(type) {
	case map[string]any:
		if _, ok := v["properties"]; ok && v["x-kubernetes-preserve-unknown-fields"] != true {
			if _, ok := v["additionalProperties"]; !ok {
				v["additionalProperties"] = false
			}
		}
		for _, c := range v {
			strict(c)
		}
	case []any:
		for _, c := range v {
			strict(c)
		}
	}
}

func dig(t *testing.T, m map[string]any, path ...string) map[string]any {
	t.Helper()
	for _, p := range path {
		n, ok := m[p].(map[string]any)
		if !ok {
			t.Fatalf("the CRD schema has no %s", strings.Join(path, "."))
		}
		m = n
	}
	return m
}

// validateSchema checks a value (as JSON) against a schema.
func validateSchema(t *testing.T, what string, s *jsonschema.Schema, v any) {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(inst); err != nil {
		t.Errorf("%s does not match its schema: %v", what, err)
	}
}

func validateMeta(t *testing.T, what string, m metav1.ObjectMeta) {
	t.Helper()
	errs := apimachineryvalidation.ValidateObjectMeta(&m, false, apimachineryvalidation.NameIsDNS1035Label, field.NewPath("metadata"))
	if len(errs) > 0 {
		t.Errorf("%s: %v", what, errs.ToAggregate())
	}
}

// envOf returns a container's environment, with JOB_COMPLETION_INDEX as
// Kubernetes sets it for the pod of that index.
func envOf(c corev1.Container, index int) map[string]string {
	env := map[string]string{cluster.EnvJobCompletionIndex: strconv.Itoa(index)}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// podEnv is a container's environment as the cluster sets it for the pod
// of the given index and labels: JOB_COMPLETION_INDEX, the values, and the
// pod's labels through the downward API (metadata.labels['KEY']).
func podEnv(t *testing.T, c corev1.Container, index int, labels map[string]string) map[string]string {
	t.Helper()
	env := envOf(c, index)
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			continue
		}
		var path string
		if e.ValueFrom.FieldRef != nil {
			path = e.ValueFrom.FieldRef.FieldPath
		}
		key, ok := strings.CutPrefix(path, "metadata.labels['")
		key, ok2 := strings.CutSuffix(key, "']")
		v, ok3 := labels[key]
		if !ok || !ok2 || !ok3 {
			t.Fatalf("container %s: %s comes from %+v, which the test cannot resolve", c.Name, e.Name, e.ValueFrom)
		}
		env[e.Name] = v
	}
	return env
}

func initContainer(t *testing.T, what string, spec corev1.PodSpec) corev1.Container {
	t.Helper()
	if len(spec.InitContainers) != 1 {
		t.Fatalf("%s: %d init containers; want the one that copies the certificates", what, len(spec.InitContainers))
	}
	return spec.InitContainers[0]
}

func container(t *testing.T, what string, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("%s: no container %q", what, name)
	return corev1.Container{}
}

func portNamed(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

// checkPod checks what every distflow pod needs, in either manifest: the
// metrics annotations agree with --metrics-port and a container port, the
// certificates come from the Secret through a memory volume, every mount
// names a volume, keys are refused to others.
func checkPod(t *testing.T, what string, tmpl corev1.PodTemplateSpec, main string) {
	t.Helper()
	if errs := metavalidation.ValidateLabels(tmpl.Labels, field.NewPath("labels")); len(errs) > 0 {
		t.Errorf("%s: %v", what, errs.ToAggregate())
	}
	c := container(t, what, tmpl.Spec, main)
	args := strings.Join(c.Args, " ")
	if c.Args[0] != "train" {
		t.Errorf("%s: the command is %q, want distflow train", what, args)
	}
	a := tmpl.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/path"] != "/metrics" {
		t.Errorf("%s: annotations %v: want prometheus.io/scrape \"true\" and path /metrics", what, a)
	}
	mport := portNamed(c, "metrics")
	if a["prometheus.io/port"] != strconv.Itoa(int(mport)) || !slices.Contains(c.Args, fmt.Sprintf("--metrics-port=%d", mport)) {
		t.Errorf("%s: prometheus.io/port %q, container port metrics %d, args %q: want the same port", what, a["prometheus.io/port"], mport, args)
	}
	if !slices.Contains(c.Args, "--certs-dir=/certs") {
		t.Errorf("%s: args %q lack --certs-dir=/certs", what, args)
	}
	for _, ct := range append(slices.Clone(tmpl.Spec.InitContainers), tmpl.Spec.Containers...) {
		for name := range merge(ct.Resources.Requests, ct.Resources.Limits) {
			// The API server's rule: a standard resource or a qualified name.
			if !slices.Contains([]corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}, name) &&
				!strings.HasPrefix(string(name), "hugepages-") && !strings.Contains(string(name), "/") {
				t.Errorf("%s: container %s: unknown resource %q", what, ct.Name, name)
			}
		}
	}
	vols := map[string]corev1.Volume{}
	for _, v := range tmpl.Spec.Volumes {
		vols[v.Name] = v
	}
	for _, ct := range append(slices.Clone(tmpl.Spec.InitContainers), tmpl.Spec.Containers...) {
		for _, m := range ct.VolumeMounts {
			if _, ok := vols[m.Name]; !ok {
				t.Errorf("%s: container %s mounts %q, which is no volume", what, ct.Name, m.Name)
			}
		}
		sc := ct.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("%s: container %s may escalate or keeps capabilities", what, ct.Name)
		}
	}
	if v := vols["certs"]; v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("%s: the certs volume is %+v, want a memory emptyDir", what, v.VolumeSource)
	}
	if v := vols["certs-secret"]; v.Secret == nil || v.Secret.SecretName != "mnist-certs" {
		t.Errorf("%s: the certs-secret volume is %+v, want Secret mnist-certs", what, v.VolumeSource)
	}
	if len(tmpl.Spec.InitContainers) != 1 || !strings.Contains(strings.Join(tmpl.Spec.InitContainers[0].Command, " "), "chmod 0600 /certs/*.key") {
		t.Errorf("%s: no init container making the keys private", what)
	} else if cmd := strings.Join(tmpl.Spec.InitContainers[0].Command, " "); strings.Contains(cmd, "/secret/*") {
		// Each pod copies its own key alone (the pods tests run the
		// command): not every task's.
		t.Errorf("%s: the init container copies the whole Secret: %q", what, cmd)
	}
	for _, ct := range tmpl.Spec.Containers {
		for _, m := range ct.VolumeMounts {
			if m.Name == "certs-secret" {
				t.Errorf("%s: container %s mounts the Secret with every task's key", what, ct.Name)
			}
		}
	}
	ps := tmpl.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.FSGroup != nil {
		// fsGroup would make the keys group-readable, which distflow refuses.
		t.Errorf("%s: pod security context %+v: want runAsNonRoot and no fsGroup", what, ps)
	}
}

// TestIndexedJobs validates indexed-jobs.yaml: a headless Service and one
// Indexed Job per job of the cluster, whose pods' TF_CONFIG (built from
// JOB_COMPLETION_INDEX) parses and names the pods as Kubernetes names them.
func TestIndexedJobs(t *testing.T) {
	s := loadSchemas(t)
	var svc *corev1.Service
	jobs := map[string]*batchv1.Job{}
	for _, d := range readDocs(t, "indexed-jobs.yaml") {
		switch d.meta.APIVersion + " " + d.meta.Kind {
		case "v1 Service":
			svc = new(corev1.Service)
			decodeStrict(t, d, svc)
			validateMeta(t, "Service", svc.ObjectMeta)
		case "batch/v1 Job":
			j := new(batchv1.Job)
			decodeStrict(t, d, j)
			// The pod template as written (the typed one would add fields
			// such as a null creationTimestamp when marshalled again).
			var raw struct {
				Spec struct {
					Template any `json:"template"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal(d.raw, &raw); err != nil {
				t.Fatal(err)
			}
			validateSchema(t, "Job "+j.Name+" pod template", s.podTemplate, raw.Spec.Template)
			validateMeta(t, "Job "+j.Name, j.ObjectMeta)
			task := j.Labels["distflow.dev/job"]
			if _, dup := jobs[task]; dup {
				t.Fatalf("two Jobs for job %q", task)
			}
			jobs[task] = j
		default:
			t.Fatalf("%s: unexpected %s %s", d.file, d.meta.APIVersion, d.meta.Kind)
		}
	}
	if svc == nil {
		t.Fatal("no Service")
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v: want a headless Service publishing pods before they are ready", svc.Name, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
	}
	for _, want := range []string{"chief", "worker", "ps"} {
		if jobs[want] == nil {
			t.Fatalf("no Job with label distflow.dev/job=%s", want)
		}
	}
	// The Jobs' sizes, as the pods are told them.
	counts := map[string]int{}
	for task, j := range jobs {
		counts[task] = int(*j.Spec.Completions)
	}
	for task, j := range jobs {
		what := "Job " + j.Name
		sp := j.Spec
		if sp.CompletionMode == nil || *sp.CompletionMode != batchv1.IndexedCompletion {
			t.Errorf("%s: completionMode %v, want Indexed", what, sp.CompletionMode)
		}
		if sp.Parallelism == nil || *sp.Parallelism != *sp.Completions {
			t.Errorf("%s: parallelism %v, completions %d: every task runs at once", what, ptrString(sp.Parallelism), *sp.Completions)
		}
		tmpl := sp.Template
		if rp := tmpl.Spec.RestartPolicy; rp != corev1.RestartPolicyOnFailure && rp != corev1.RestartPolicyNever {
			t.Errorf("%s: restartPolicy %q, want OnFailure or Never (a Job's pods end)", what, rp)
		}
		if tmpl.Spec.Subdomain != svc.Name {
			t.Errorf("%s: subdomain %q, want the Service %q", what, tmpl.Spec.Subdomain, svc.Name)
		}
		for k, v := range svc.Spec.Selector {
			if tmpl.Labels[k] != v {
				t.Errorf("%s: pod label %s=%q, the Service selects %q", what, k, tmpl.Labels[k], v)
			}
		}
		checkPod(t, what, tmpl, "distflow")
		c := container(t, what, tmpl.Spec, "distflow")
		for _, p := range svc.Spec.Ports {
			if portNamed(c, p.TargetPort.String()) != p.Port {
				t.Errorf("%s: the Service's port %s (%d) is no container port of that name", what, p.Name, p.Port)
			}
		}
		if got := envOf(c, 0)[cluster.EnvK8sTask]; got != task {
			t.Errorf("%s: %s=%q, want %q", what, cluster.EnvK8sTask, got, task)
		}
		for i := range counts[task] {
			env := envOf(c, i)
			ij, ok, err := cluster.IndexedJobsFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if err != nil || !ok {
				t.Fatalf("%s index %d: %v (ok=%v)", what, i, err, ok)
			}
			if !maps(ij.Replicas, counts) {
				t.Errorf("%s: %s gives %v, the Jobs run %v", what, cluster.EnvK8sReplicas, ij.Replicas, counts)
			}
			js, err := ij.TFConfig()
			if err != nil {
				t.Fatal(err)
			}
			spec, self, err := cluster.FromTFConfig(js)
			if err != nil {
				t.Fatalf("%s index %d: TF_CONFIG %s: %v", what, i, js, err)
			}
			if self != (cluster.TaskID{Job: task, Index: i}) {
				t.Errorf("%s index %d: task %v", what, i, self)
			}
			// Every address is the pod Kubernetes makes: host name
			// JOBNAME-INDEX under the Service, on the grpc port.
			for _, peer := range spec.Tasks() {
				addr, _ := spec.Address(peer)
				want := fmt.Sprintf("%s-%d.%s:%d", jobs[peer.Job].Name, peer.Index, svc.Name, portNamed(c, "grpc"))
				if addr != want {
					t.Errorf("%s index %d: TF_CONFIG has %v at %q, Kubernetes names it %q", what, i, peer, addr, want)
				}
				if errs := validation.IsDNS1123Label(fmt.Sprintf("%s-%d", jobs[peer.Job].Name, peer.Index)); len(errs) > 0 {
					t.Errorf("host name of %v: %v", peer, errs)
				}
			}
		}
	}
	// The chief alone saves checkpoints; every task trains the same model.
	argsOf := func(task string) []string {
		return slices.DeleteFunc(slices.Clone(container(t, task, jobs[task].Spec.Template.Spec, "distflow").Args),
			func(a string) bool { return strings.HasPrefix(a, "--checkpoint-dir") })
	}
	for _, task := range []string{"worker", "ps"} {
		if !slices.Equal(argsOf(task), argsOf("chief")) {
			t.Errorf("the %s's args %q differ from the chief's %q", task, argsOf(task), argsOf("chief"))
		}
	}
}

func ptrString(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}

func merge(a, b corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func maps(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestTFJob validates tfjob.yaml against the v1 operator's CRD schema and
// type (strictly), its defaults and its webhook's rules, and parses the
// TF_CONFIG the operator writes into each replica (genClusterSpec in
// training-operator v1.8.1 pkg/controller.v1/tensorflow/tensorflow.go).
func TestTFJob(t *testing.T) {
	s := loadSchemas(t)
	docs := readDocs(t, "tfjob.yaml")
	if len(docs) != 1 || docs[0].meta.APIVersion != "kubeflow.org/v1" || docs[0].meta.Kind != "TFJob" {
		t.Fatalf("tfjob.yaml holds %v, want one kubeflow.org/v1 TFJob", docs)
	}
	var raw any
	if err := yaml.Unmarshal(docs[0].raw, &raw); err != nil {
		t.Fatal(err)
	}
	validateSchema(t, "TFJob", s.tfjob, raw)
	job := new(kubeflowv1.TFJob)
	decodeStrict(t, docs[0], job)
	validateMeta(t, "TFJob", job.ObjectMeta)
	kubeflowv1.SetDefaults_TFJob(job)
	switch p := job.Spec.RunPolicy.CleanPodPolicy; {
	case p == nil:
	case *p == kubeflowv1.CleanPodPolicyAll, *p == kubeflowv1.CleanPodPolicyRunning, *p == kubeflowv1.CleanPodPolicyNone:
	default:
		t.Errorf("runPolicy.cleanPodPolicy %q: want All, Running or None", *p)
	}
	if errs := validateTFJob(job); len(errs) > 0 {
		t.Fatalf("the operator's webhook would refuse the TFJob: %v", errs.ToAggregate())
	}
	const ns = "default"
	job.Namespace = ns
	replicas := map[string]int{}
	for rt, spec := range job.Spec.TFReplicaSpecs {
		replicas[strings.ToLower(string(rt))] = int(*spec.Replicas)
		checkPod(t, "TFJob "+string(rt), spec.Template, kubeflowv1.TFJobDefaultContainerName)
		c := container(t, string(rt), spec.Template.Spec, kubeflowv1.TFJobDefaultContainerName)
		if portNamed(c, kubeflowv1.TFJobDefaultPortName) == 0 {
			t.Errorf("%s: no container port named %s", rt, kubeflowv1.TFJobDefaultPortName)
		}
		if l := envOf(c, 0)["DISTFLOW_LISTEN_ADDRESS"]; l != fmt.Sprintf(":%d", portNamed(c, kubeflowv1.TFJobDefaultPortName)) {
			t.Errorf("%s: DISTFLOW_LISTEN_ADDRESS=%q, want the tfjob-port on every interface", rt, l)
		}
	}
	if !maps(replicas, map[string]int{"chief": 1, "worker": 2, "ps": 1}) {
		t.Errorf("replicas %v", replicas)
	}
	for rt, spec := range job.Spec.TFReplicaSpecs {
		for i := range int(*spec.Replicas) {
			js := operatorTFConfig(t, job, rt, i)
			spec, self, err := cluster.FromTFConfig(js)
			if err != nil {
				t.Fatalf("TF_CONFIG of %s %d: %v\n%s", rt, i, err, js)
			}
			if ws := cluster.TFConfigWarnings(js); len(ws) > 0 {
				t.Errorf("TF_CONFIG of %s %d: warnings %q", rt, i, ws)
			}
			if want := (cluster.TaskID{Job: strings.ToLower(string(rt)), Index: i}); self != want {
				t.Errorf("TF_CONFIG of %s %d: task %v", rt, i, self)
			}
			if spec.NumTasks("worker") != 2 {
				t.Errorf("TF_CONFIG of %s %d: %v", rt, i, spec.JSON())
			}
		}
	}
}

// operatorTFConfig is the TF_CONFIG the v1 operator writes for replica rt
// index i (its genTFConfigJSONStr: job-type-index.namespace.svc, the port of
// the tensorflow container's tfjob-port, "environment": "cloud").
func operatorTFConfig(t *testing.T, job *kubeflowv1.TFJob, rt kubeflowv1.ReplicaType, index int) string {
	t.Helper()
	cl := map[string][]string{}
	for r, spec := range job.Spec.TFReplicaSpecs {
		port := int32(kubeflowv1.TFJobDefaultPort)
		for _, c := range spec.Template.Spec.Containers {
			if c.Name == kubeflowv1.TFJobDefaultContainerName {
				if p := portNamed(c, kubeflowv1.TFJobDefaultPortName); p != 0 {
					port = p
				}
			}
		}
		name := strings.ToLower(string(r))
		for i := range int(*spec.Replicas) {
			cl[name] = append(cl[name], fmt.Sprintf("%s-%s-%d.%s.svc:%d", job.Name, name, i, job.Namespace, port))
		}
	}
	b, err := json.Marshal(struct {
		Cluster map[string][]string `json:"cluster"`
		Task    struct {
			Type  string `json:"type"`
			Index int    `json:"index"`
		} `json:"task"`
		Environment string `json:"environment"`
	}{Cluster: cl, Task: struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}{strings.ToLower(string(rt)), index}, Environment: "cloud"})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// validateTFJob is the v1 operator's webhook validation (training-operator
// v1.8.1 pkg/webhooks/tensorflow/tfjob_webhook.go validateTFJob, which is
// unexported and whose package pulls in controller-runtime's webhook
// server): a DNS-1035 name, a container named tensorflow with an image in
// every replica type, at most one chief or master.
func validateTFJob(job *kubeflowv1.TFJob) field.ErrorList {
	var errs field.ErrorList
	if e := apimachineryvalidation.NameIsDNS1035Label(job.Name, false); len(e) != 0 {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), job.Name, strings.Join(e, ",")))
	}
	path := field.NewPath("spec", "tfReplicaSpecs")
	if job.Spec.TFReplicaSpecs == nil {
		errs = append(errs, field.Required(path, "must be required"))
	}
	chiefs := 0
	for rt, spec := range job.Spec.TFReplicaSpecs {
		cp := path.Key(string(rt)).Child("template", "spec", "containers")
		if spec == nil || len(spec.Template.Spec.Containers) == 0 {
			errs = append(errs, field.Required(cp, "must be specified"))
			continue
		}
		if kubeflowv1.IsChiefOrMaster(rt) {
			chiefs++
		}
		found := false
		for i, c := range spec.Template.Spec.Containers {
			if c.Image == "" {
				errs = append(errs, field.Required(cp.Index(i).Child("image"), "must be required"))
			}
			found = found || c.Name == kubeflowv1.TFJobDefaultContainerName
		}
		if !found {
			errs = append(errs, field.Required(cp, "must have a container named "+kubeflowv1.TFJobDefaultContainerName))
		}
	}
	if chiefs > 1 {
		errs = append(errs, field.Forbidden(path, "must not have more than 1 Chief or Master role"))
	}
	return errs
}
