// Command distflow trains the reference models and (later) runs cluster tasks.
//
//	distflow train --model mlp --epochs 5
//	distflow train --model linreg --steps 2000 --json
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/localcluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "distflow:", err)
		if estimator.Permanent(err) {
			os.Exit(localcluster.ExitPermanent) // a launcher does not restart it
		}
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "distflow",
		Short:         "distflow trains machine-learning models on one machine or a cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Users of the original system type --task_index; both spellings work.
	root.SetGlobalNormalizationFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
	})
	// An unknown flag is told with the one probably meant; subcommands inherit it.
	root.SetFlagErrorFunc(flagError)
	// Under Kubernetes, TF_CONFIG may come from an Indexed Job (kubernetes.go).
	root.PersistentPreRunE = fromKubernetes
	root.AddCommand(newTrainCommand())
	root.AddCommand(newServerCommand())
	root.AddCommand(newStatusCommand())
	root.AddCommand(newServeCommand())
	root.AddCommand(newCertsCommand())
	root.AddCommand(newChaosCommand())
	root.AddCommand(newDevicesCommand())
	return root
}
