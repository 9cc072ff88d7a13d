// Package stepctx provides a cancellable context.Context with an optional
// deadline that lives inside the state of what it serves (a step, a
// request), so that deriving it allocates nothing of its own:
//
//	type stepState struct {
//		ctx stepctx.Context
//		...
//	}
//
//	ss := &stepState{}
//	ss.ctx.Init(parent, deadline) // deadline: the zero time for none
//	defer ss.ctx.Cancel(nil)
//	run(&ss.ctx)
//
// A child Context of a parent Context (even one wrapped by
// context.WithValue) registers with it without an allocation or a
// goroutine; Watch does the same for a caller's function. With the
// standard contexts it works as theirs do: a standard child registers
// through the AfterFunc method, and a Context under a standard parent
// through context.AfterFunc (which costs a few allocations, as a standard
// child costs one or two). One case costs more: a standard context
// derived from a Context wrapped by context.WithValue cannot see it and
// watches it with a goroutine, as it would any context of another
// package; derive it from the Context itself, or from a Context child.
//
// context.WithCancel and context.WithTimeout cost two to four allocations
// each (the context, the cancel function, the timer and its function);
// a remote step derived half a dozen of them.
package stepctx
