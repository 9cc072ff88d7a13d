package checkpoint

import "time"

// Schedule decides when a training loop saves: every Steps global steps or
// every Every of wall time, whichever comes first (a zero field disables
// that trigger; both zero never fires). The first call to Due sets the
// baseline, so a restored run does not save at once. It is not safe for
// concurrent use; the chief's loop owns it.
//
//	sched := checkpoint.Schedule{Steps: *saveSteps, Every: *saveEvery}
//	for ... {
//		gs := ... // the global step after this training step
//		if sched.Due(gs, time.Now()) {
//			if _, err := sv.Save(ctx, sess, gs); err != nil { ... }
//			sched.Saved(gs, time.Now())
//		}
//	}
type Schedule struct {
	Steps int64
	Every time.Duration

	started  bool
	lastStep int64
	lastTime time.Time
}

// Due reports whether a checkpoint is due at global step step and time now.
func (s *Schedule) Due(step int64, now time.Time) bool {
	if !s.started {
		s.Saved(step, now)
		return false
	}
	return s.Steps > 0 && step-s.lastStep >= s.Steps || s.Every > 0 && now.Sub(s.lastTime) >= s.Every
}

// Saved records a checkpoint written at step and now.
func (s *Schedule) Saved(step int64, now time.Time) {
	s.started, s.lastStep, s.lastTime = true, step, now
}
