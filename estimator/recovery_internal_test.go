package estimator

import (
	"errors"
	"fmt"
	"testing"

	"github.com/distflow/distflow/kernel"
	"github.com/distflow/distflow/worker"
)

// The chief's aggregation loop waits for the session's recovery when a
// round reached a lost ps, or a restarted one whose variables are not yet
// restored (seen in a chaos run: a sync chief stopped while its ps was
// killed twice; its loop stopped for good and every replica waited for a
// token); anything else stops it.
func TestAggregationAwaitsRecovery(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("round: %w", worker.ErrUnavailable), true},
		{fmt.Errorf("round: %w", worker.ErrNoGraph), true},
		{fmt.Errorf("round: task /job:ps/task:0: %w", kernel.ErrUninitialized), true},
		{errors.New("round: a kernel failed"), false},
	} {
		if got := awaitsRecovery(tc.err); got != tc.want {
			t.Errorf("awaitsRecovery(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
