package localcluster_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/distflow/distflow/cluster"
	"github.com/distflow/distflow/localcluster"
)

func ExampleParse() {
	jobs, err := localcluster.Parse("ps=1,worker=2")
	fmt.Println(jobs.PS, jobs.Worker, jobs.Chief, err)
	_, err = localcluster.Parse("ps=1,worker=x")
	fmt.Println(err)
	_, err = localcluster.Parse("worker=2")
	fmt.Println(err)
	jobs, err = localcluster.Parse("worker=2", localcluster.WithoutPS()) // all-reduce: the workers hold the model
	fmt.Println(jobs, err)
	// Output:
	// 1 2 0 <nil>
	// localcluster: "ps=1,worker=x": invalid jobs: "worker=x" is not job=count (e.g. ps=1,worker=2)
	// localcluster: "worker=2": invalid jobs: no ps task (want ps=1 or more, e.g. ps=1,worker=2)
	// worker=2 <nil>
}

// A program that runs as a local cluster when given --local-cluster.
func ExampleRun() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !localcluster.IsTask() {
		jobs, err := localcluster.Parse("ps=1,worker=2")
		if err != nil {
			log.Fatal(err)
		}
		err = localcluster.Run(ctx, localcluster.Config{
			Jobs:               jobs,
			Args:               localcluster.WithoutFlag(os.Args[1:], "local-cluster"),
			RestartPS:          true,
			TolerateWorkerLoss: true,
		})
		if err != nil {
			log.Fatal(err)
		}
		return
	}
	// In a task:
	spec, self, _, err := cluster.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	lis, err := localcluster.Listener()
	if err != nil {
		log.Fatal(err)
	}
	defer lis.Close()
	log.Printf("%s of %v serving on %s", self, spec, lis.Addr())
}
