package runsc

import (
	"context"
	"errors"
	"os"
	"syscall"

	"github.com/drainkit/drainkit/pause/escalate"
)

// Target returns container id as a [escalate.Target] for [escalate.Policy]: Signal is
// `runsc kill --all`, Wait is `runsc wait`, and Exited asks `runsc state`. Only the runtime's word ends a wait: a container runsc no longer knows,
// or reports stopped, has exited; a `runsc wait` that failed, or whose exit status another
// reaper collected (ECHILD), says nothing by itself, so the state is asked and, when it
// cannot answer, the error goes to the escalate.Policy, which treats the container as running.
func (r *Runtime) Target(id string) escalate.Target {
	return escalate.Funcs{
		SignalFunc: func(ctx context.Context, sig syscall.Signal) error {
			err := r.Kill(ctx, id, sig, true)
			if err == nil || errors.Is(err, ErrStatusLost) {
				// A lost status: the kill ran and may have been what ended the
				// container, so a stopped state now does not mean it was gone
				// before. The Policy keeps its wait after the signal and waits.
				return err
			}
			if gone, _ := r.exited(ctx, id); gone {
				return os.ErrProcessDone
			}
			return err
		},
		WaitFunc: func(ctx context.Context) error {
			_, err := r.Wait(ctx, id)
			if err == nil || ctx.Err() != nil {
				return ctx.Err()
			}
			if gone, _ := r.exited(ctx, id); gone {
				return os.ErrProcessDone
			}
			return err
		},
		ExitedFunc: func(ctx context.Context) (bool, error) { return r.exited(ctx, id) },
	}
}

// exited asks runsc state whether container id has exited: it is stopped, or runsc no
// longer knows it.
func (r *Runtime) exited(ctx context.Context, id string) (bool, error) {
	st, err := r.State(ctx, id)
	switch {
	case errors.Is(err, ErrNotExist):
		return true, nil
	case err != nil:
		return false, err
	}
	return st.Status == "stopped", nil
}
