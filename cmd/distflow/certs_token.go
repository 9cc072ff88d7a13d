package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/distflow/distflow/pki"
)

// newCertsToolTokenCommand returns `distflow certs tool-token`: the tool
// token of a cluster token (pki.WriteToolToken), for tools of a cluster
// secured by a token rather than by certificates.
func newCertsToolTokenCommand() *cobra.Command {
	var f struct {
		token, out string
		overwrite  bool
	}
	cmd := &cobra.Command{
		Use:   "tool-token --cluster-token-file TOKEN --out FILE",
		Short: "Make a tool token from a cluster token, for tools (distflow status, grpc:// sessions)",
		Long: `Make a tool token from a cluster token.

A tool token (a file distflow-tool:<hex>, mode 0600) lets a tool call what
tools may call (the master service, a worker's status) and nothing else:
the tasks' credentials cannot be derived from it, so a tool holding it
cannot run graphs, receive tensors, join the ring or stop a task. Give
tools the tool token, pass it to them with --cluster-token-file, and keep
the cluster token to the tasks. A task refuses to start with a tool token.`,
		Example: `  distflow certs tool-token --cluster-token-file token --out tool.token
  distflow status --cluster-token-file tool.token h0:2222`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.token == "" || f.out == "" {
				return errors.New("certs tool-token: --cluster-token-file and --out are required")
			}
			if samePath(f.token, f.out) {
				return fmt.Errorf("certs tool-token: --out %s is the cluster token itself", f.out)
			}
			if _, err := os.Lstat(f.out); err == nil && !f.overwrite {
				return fmt.Errorf("certs tool-token: %s exists; --overwrite replaces it", f.out)
			}
			if err := pki.WriteToolToken(f.token, f.out); err != nil {
				return fmt.Errorf("certs tool-token: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "made %s  tool token of %s: give it to tools (--cluster-token-file), not to tasks\n", f.out, f.token)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.token, "cluster-token-file", "", "the cluster token (the file the tasks get with --cluster-token-file)")
	fl.StringVar(&f.out, "out", "", "file to write the tool token to (mode 0600)")
	fl.BoolVar(&f.overwrite, "overwrite", false, "replace --out if it exists")
	return cmd
}

// samePath reports whether paths a and b name one file (or, when either is
// missing, the same cleaned absolute path).
func samePath(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(sa, sb)
	}
	aa, _ := filepath.Abs(a)
	ab, _ := filepath.Abs(b)
	return aa == ab
}
