package checkpoint_test

import (
	"testing"
	"time"

	"github.com/distflow/distflow/checkpoint"
)

func TestSchedule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type call struct {
		step int64
		secs int
		want bool
	}
	tests := []struct {
		name  string
		sched checkpoint.Schedule
		calls []call
	}{
		{"steps", checkpoint.Schedule{Steps: 100}, []call{{50, 0, false}, {149, 999, false}, {150, 999, true}, {250, 999, true}}},
		{"secs", checkpoint.Schedule{Every: 60 * time.Second}, []call{{0, 0, false}, {10, 59, false}, {11, 60, true}, {12, 119, false}, {13, 120, true}}},
		{"both", checkpoint.Schedule{Steps: 10, Every: 60 * time.Second}, []call{{0, 0, false}, {5, 61, true}, {14, 62, false}, {15, 63, true}}},
		{"never", checkpoint.Schedule{}, []call{{0, 0, false}, {1e6, 1e6, false}}},
	}
	for _, tc := range tests {
		s := tc.sched
		for i, c := range tc.calls {
			now := t0.Add(time.Duration(c.secs) * time.Second)
			if got := s.Due(c.step, now); got != c.want {
				t.Errorf("%s: call %d Due(%d, +%ds) = %v, want %v", tc.name, i, c.step, c.secs, got, c.want)
			}
			if c.want {
				s.Saved(c.step, now)
			}
		}
	}
}
