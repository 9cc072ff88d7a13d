package main

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/distflow/distflow/serving"
)

func newServeCommand() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve --model-dir DIR --port P",
		Short: "Serve a model export over TensorFlow Serving's REST API",
		Long: `Serve the newest complete version under --model-dir (numbered directories, as
distflow train --export DIR writes them; tensorflow_model_server's --model_base_path) over
TensorFlow Serving's REST API, switching to newer versions as they appear; or several
models, each under its name, from a --model-config-file as tensorflow_model_server reads it.
Until a model's directory holds a complete version (or while it does not exist yet), the
server waits for one, as tensorflow_model_server does: it polls every --poll-interval,
logs what it waits for, and answers 503 for that model, its status endpoint included, so
that readiness probes fail until it is loaded. One line with the URL of each model is
printed when the server listens; it serves until SIGINT or SIGTERM.`,
		Example: `  distflow serve --model-dir /models/mnist --port 8501 --model-name mnist
  curl -d '{"instances": [[0.1, ...]]}' http://127.0.0.1:8501/v1/models/mnist:predict
  distflow serve --model-config-file models.config --port 8501`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	f.add(cmd.Flags())
	return cmd
}

// serveFlags are distflow serve's flags.
type serveFlags struct {
	modelDir, name, host string
	configFile           string
	metricsPath          string
	port                 int
	batching             bool
	maxBatch, threads    int
	batchTimeout, poll   time.Duration
	maxBody              int64
	// The HTTP limits: 0 turns a timeout (or the rate) off.
	readHeaderTimeout, readTimeout, writeTimeout, idleTimeout time.Duration
	minRate                                                   int64
	maxHeader                                                 int
}

func (c *serveFlags) add(f *pflag.FlagSet) {
	f.StringVar(&c.modelDir, "model-dir", "", "base directory of the model's numbered versions (required, unless --model-config-file)")
	f.StringVar(&c.configFile, "model-config-file", "", "serve the models of this file, tensorflow_model_server's --model_config_file (model_config_list { config { name: \"mnist\" base_path: \"/models/mnist\" } ... }), each under its name")
	f.IntVar(&c.port, "port", 8501, "TCP port of the REST API (0: a free port)")
	f.StringVar(&c.host, "host", "127.0.0.1", "address to listen on")
	f.StringVar(&c.name, "model-name", "default", "the NAME of /v1/models/NAME")
	f.BoolVar(&c.batching, "enable-batching", true, "merge concurrent requests into batches")
	f.IntVar(&c.maxBatch, "max-batch-size", 64, "most rows in one batch")
	f.IntVar(&c.threads, "batch-threads", 0, "batches predicted at once (0: one per core), as TF Serving's num_batch_threads")
	f.DurationVar(&c.batchTimeout, "batch-timeout", 2*time.Millisecond, "longest a request waits for a batch to fill")
	f.DurationVar(&c.poll, "poll-interval", time.Second, "how often --model-dir is checked for a new version")
	f.Int64Var(&c.maxBody, "max-body-bytes", 32<<20, "largest request body accepted (a larger Content-Length is answered 413 before reading)")
	f.DurationVar(&c.readHeaderTimeout, "read-header-timeout", 10*time.Second, "longest a client may take to send a request's header (0: no limit)")
	f.DurationVar(&c.readTimeout, "read-timeout", 30*time.Second, "longest a client may take to send a request's body, plus one second per --min-transfer-rate bytes received; slower clients get 408 (0: no limit)")
	f.DurationVar(&c.writeTimeout, "write-timeout", 30*time.Second, "longest a client may take to receive an answer, plus one second per --min-transfer-rate bytes of it (0: no limit)")
	f.Int64Var(&c.minRate, "min-transfer-rate", 256<<10, "bytes per second a client must sustain beyond --read-timeout and --write-timeout (0: the timeouts do not grow with the size)")
	f.DurationVar(&c.idleTimeout, "idle-timeout", 2*time.Minute, "how long a kept-alive connection may wait for its next request (0: no limit)")
	f.IntVar(&c.maxHeader, "max-header-bytes", 64<<10, "largest request header accepted (a larger one is answered 431)")
	f.StringVar(&c.metricsPath, "metrics-path", serving.DefaultMetricsPath, `where Prometheus scrapes the request counts and latencies, on the REST port, under TF Serving's metric names (:tensorflow:serving:request_count, ...); "" for none`)
}

// check refuses flags that say nothing servable.
func (c *serveFlags) check(fl *pflag.FlagSet) error {
	switch {
	case c.configFile != "" && (fl.Changed("model-dir") || fl.Changed("model-name")):
		return errors.New("serve: --model-config-file names each model and its directory: drop --model-dir and --model-name")
	case c.modelDir == "" && c.configFile == "":
		return errors.New("serve: --model-dir is required (or --model-config-file)")
	case c.port < 0 || c.port > 65535:
		return fmt.Errorf("serve: bad --port %d: want 0 to 65535 (0 picks a free port)", c.port)
	case c.maxBatch <= 0:
		return fmt.Errorf("serve: bad --max-batch-size %d: it must be positive", c.maxBatch)
	case c.threads < 0:
		return fmt.Errorf("serve: bad --batch-threads %d: it must not be negative (0: one per core)", c.threads)
	case c.batchTimeout <= 0:
		return fmt.Errorf("serve: bad --batch-timeout %v: it must be positive", c.batchTimeout)
	case c.poll <= 0:
		return fmt.Errorf("serve: bad --poll-interval %v: it must be positive", c.poll)
	case c.maxBody <= 0:
		return fmt.Errorf("serve: bad --max-body-bytes %d: it must be positive", c.maxBody)
	case c.name == "":
		return errors.New("serve: --model-name is empty")
	case c.maxHeader <= 0:
		return fmt.Errorf("serve: bad --max-header-bytes %d: it must be positive", c.maxHeader)
	case c.minRate < 0:
		return fmt.Errorf("serve: bad --min-transfer-rate %d: it must not be negative (0: bodies get no more time than the timeouts)", c.minRate)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"read-header-timeout", c.readHeaderTimeout}, {"read-timeout", c.readTimeout}, {"write-timeout", c.writeTimeout}, {"idle-timeout", c.idleTimeout}} {
		if d.v < 0 {
			return fmt.Errorf("serve: bad --%s %v: it must not be negative (0: no limit)", d.flag, d.v)
		}
	}
	if err := serving.CheckMetricsPath(c.metricsPath); err != nil {
		return fmt.Errorf("serve: bad --metrics-path (or \"\" for no metrics): %w", err)
	}
	return nil
}

// models is the serving configuration of the flags' models.
func (c *serveFlags) models(log *slog.Logger) ([]serving.ModelSpec, serving.ModelsConfig, error) {
	off := func(d time.Duration) time.Duration { return cmp.Or(d, -1) }
	httpCfg := serving.HTTPConfig{
		ReadHeaderTimeout: off(c.readHeaderTimeout), ReadTimeout: off(c.readTimeout), WriteTimeout: off(c.writeTimeout),
		IdleTimeout: off(c.idleTimeout), MinTransferRate: cmp.Or(c.minRate, -1), MaxHeaderBytes: c.maxHeader,
	}
	specs := []serving.ModelSpec{{Name: c.name, BasePath: c.modelDir}}
	if c.configFile != "" {
		var err error
		if specs, err = serving.ReadModelConfigFile(c.configFile); err != nil {
			return nil, serving.ModelsConfig{}, err
		}
	}
	mc := serving.ModelsConfig{MetricsPath: c.metricsPath, DisableMetrics: c.metricsPath == "", HTTP: httpCfg}
	for _, sp := range specs {
		mc.Models = append(mc.Models, serving.Config{
			BaseDir: sp.BasePath, ModelName: sp.Name, DisableBatching: !c.batching,
			MaxBatchSize: c.maxBatch, BatchThreads: c.threads, BatchTimeout: c.batchTimeout, PollInterval: c.poll,
			MaxBodyBytes: c.maxBody, Logger: log, WaitForVersion: true,
		})
	}
	return specs, mc, nil
}

// run serves the flags' models until the command's context ends.
func (c *serveFlags) run(cmd *cobra.Command) error {
	if err := c.check(cmd.Flags()); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	specs, mc, err := c.models(log)
	if err != nil {
		return err
	}
	models, err := serving.NewModels(mc)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(c.host, strconv.Itoa(c.port)))
	if err != nil {
		models.Close()
		return fmt.Errorf("serve: --host %s --port %d: %w", c.host, c.port, err)
	}
	if c.metricsPath != "" {
		log.Info("serve: Prometheus metrics", "url", "http://"+ln.Addr().String()+c.metricsPath)
	}
	for _, sp := range specs {
		url := fmt.Sprintf("http://%s/v1/models/%s", ln.Addr(), sp.Name)
		if v := models.Server(sp.Name).Version(); v != 0 {
			fmt.Fprintf(cmd.OutOrStdout(), "serving model %q version %d at %s\n", sp.Name, v, url)
		} else {
			fmt.Fprintf(cmd.OutOrStdout(), "waiting for model %q's first version under %s (distflow train --export %s writes one); it will be served at %s\n", sp.Name, sp.BasePath, sp.BasePath, url)
		}
	}
	return models.Serve(cmd.Context(), ln)
}
