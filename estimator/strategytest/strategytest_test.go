package strategytest_test

import (
	"testing"

	"github.com/distflow/distflow/estimator"
	"github.com/distflow/distflow/estimator/strategytest"
)

// Every built-in strategy passes the suite, on 1 ps + 2 workers or, for
// the collective strategies, 2 workers.
func TestBuiltInStrategies(t *testing.T) {
	ps := map[string]int{"ps": 1, "worker": 2}
	ring := map[string]int{"worker": 2}
	for _, tc := range []struct {
		strategy estimator.Strategy
		jobs     map[string]int
	}{
		{estimator.Async{}, ps},
		{estimator.Sync{}, ps},
		{estimator.Sync{ReplicasToAggregate: 1}, ps},
		{estimator.Staleness{Bound: 2}, ps},
		{estimator.InGraph{}, ps},
		{estimator.AllReduce{}, ring},
		{estimator.AllReduce{}, ps}, // summation servers
		{estimator.Averaging{Every: 4}, ring},
	} {
		t.Run(tc.strategy.String()+"-"+jobsName(tc.jobs), func(t *testing.T) {
			strategytest.Run(t, tc.strategy, tc.jobs)
		})
	}
}

func jobsName(jobs map[string]int) string {
	if jobs["ps"] > 0 {
		return "ps"
	}
	return "ring"
}
