package runsc

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/internal/procstat"
	"github.com/drainkit/drainkit/pause/escalate"
)

// Target returns container id as a [escalate.Target] for [escalate.Policy]: Signal is
// `runsc kill` of the container's init for SIGTERM, as the kubelet's runtime (containerd,
// runc) and ateom send it, so that an init that has its children save before they stop
// gets to, and for the SIGCONT the Policy sends after it (one stopped by SIGSTOP acts
// on its SIGTERM only once continued); and `runsc kill --all`, every process of the
// container, for SIGKILL. (SIGTERM
// to every process killed such a child before its init could ask it to save. gVisor
// gives a container's init no PID 1 immunity: one without a handler ends at SIGTERM.)
// Wait is `runsc wait`, and Exited asks `runsc state`. A kill or a wait that fails says
// the container is gone, with no `runsc state` after it, when runsc found the sandbox
// process gone, or when the PID of the control server it could not reach is a zombie or
// gone (sandboxGone), and a kill when runsc does not know the container (ErrNotExist),
// whether or not another reaper took its exit status: such a kill sent no signal. A
// kill whose status was lost with no such words may have delivered its signal, and
// returns ErrStatusLost, which the Policy takes for sent. Only the runtime's word, or
// the kernel's, ends a wait: a container runsc no longer knows, or reports stopped, has
// exited, and so has one whose sandbox process is a zombie not yet reaped, and one whose
// `runsc wait` wrote its exit status, even when another reaper collected that wait's own
// (ECHILD: [Runtime.Wait]); any other failed `runsc wait` says nothing by itself, so
// the state is asked and, when it cannot answer, the error goes to the escalate.Policy,
// which treats the container as running. Each runs its runsc command under the context
// it is given, which the Policy makes its own for SIGKILL (at least a second past its
// end): under the Policy's context, a context cancelled after SIGTERM had exec refuse to
// start `runsc kill --all`, and a sandbox that ignored SIGTERM ran on (row 970).
func (r *Runtime) Target(id string) escalate.Target {
	return escalate.Funcs{
		SignalFunc: func(ctx context.Context, sig syscall.Signal) error {
			err := r.Kill(ctx, id, sig, sig == syscall.SIGKILL)
			if err == nil {
				return nil
			}
			if sandboxGone(err) || errors.Is(err, ErrNotExist) {
				// runsc's words (or the kernel's, for the PID it named) say it
				// sent no signal and the sandbox is gone, or runsc no longer knows
				// the container, whether its status was lost or not: read first,
				// where a lost status was returned before them and a sandbox that
				// exited on its SIGTERM, its SIGKILL so refused, ended unknown (row
				// 835), and a container deleted before its SIGTERM was Exited, not
				// Gone (row 836).
				return os.ErrProcessDone
			}
			if errors.Is(err, ErrStatusLost) {
				// A lost status with no such words: the kill ran and may have
				// been what ended the container, so a stopped state now does not
				// mean it was gone before. The Policy keeps its wait after the
				// signal and waits.
				return err
			}
			if gone, _ := r.Exited(ctx, id); gone {
				return os.ErrProcessDone
			}
			return err
		},
		WaitFunc: func(ctx context.Context) error {
			// runsc wait on a container that has already stopped does not return
			// (it gives up after its own 5 s), and once the sandbox's control server
			// is gone it polls the sandbox with kill(pid, 0), which a zombie passes:
			// either way the wait would outlast the exit. So the state is asked
			// first, and a zombie is watched for alongside the wait.
			st, err := r.State(ctx, id)
			if errors.Is(err, ErrNotExist) || err == nil && (st.Status == "stopped" || st.Pid > 0 && zombie(st.Pid)) {
				return os.ErrProcessDone // it had exited before the wait
			}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var dead atomic.Bool
			if err == nil && st.Pid > 0 {
				go func() {
					tick := time.NewTicker(zombiePoll)
					defer tick.Stop()
					for {
						select {
						case <-wctx.Done():
							return
						case <-tick.C:
							if zombie(st.Pid) {
								dead.Store(true)
								cancel()
								return
							}
						}
					}
				}()
			}
			_, err = r.Wait(wctx, id)
			if dead.Load() {
				return os.ErrProcessDone
			}
			if err == nil {
				// runsc's word that it exited, even when ctx ended as it came:
				// asked first, ctx's end lost it, and the Policy took the
				// sandbox for running (row 1390).
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if sandboxGone(err) {
				return os.ErrProcessDone
			}
			if gone, _ := r.Exited(ctx, id); gone {
				return os.ErrProcessDone
			}
			return err
		},
		ExitedFunc: func(ctx context.Context) (bool, error) { return r.Exited(ctx, id) },
	}
}

// Exited asks runsc state whether container id has exited: it is stopped, or runsc no
// longer knows it, or its sandbox process is a zombie. runsc tells a live sandbox by
// kill(pid, 0), which a zombie passes too, so it reports a sandbox that has exited as
// running until the zombie's parent reaps it. That parent is not runsc (its `run -detach`
// exited long before) but whoever adopts orphans: PID 1 or a subreaper, which may reap
// late (a busy PID 1 took seconds under load) or never. Meanwhile `runsc kill` and
// `runsc wait` fail (the control server is gone), so without this the exit is not seen
// before the Policy's waits run out. A zombie is the kernel's own word that the process
// exited: only its status is still to be collected.
func (r *Runtime) Exited(ctx context.Context, id string) (bool, error) {
	st, err := r.State(ctx, id)
	switch {
	case errors.Is(err, ErrNotExist):
		return true, nil
	case err != nil:
		return false, err
	}
	return st.Status == "stopped" || st.Pid > 0 && zombie(st.Pid), nil
}

// runsc's words for a container whose sandbox process its own kill(pid, 0) found gone,
// exited and reaped: notRunning is runsc kill's refusal to signal it; noLongerRunning is
// runsc wait's failure once it could not reach the control server and found the process
// gone ("sandbox no longer running and its exit status is unavailable": the status went
// to the process's reaper, not to runsc).
const (
	notRunning      = "sandbox is not running"
	noLongerRunning = "sandbox no longer running"
)

// controlServerPID finds the sandbox's PID in runsc's failure to reach its control
// server ("connecting to control server at PID 16573: connection refused"; older runsc
// wrote "error connecting to control server at pid").
var controlServerPID = regexp.MustCompile(`(?i)control server at pid (\d+)`)

// sandboxGone reports whether err, a `runsc kill` or `runsc wait` that failed, says the
// container's sandbox has exited, by runsc's word or, for the PID it names, the
// kernel's: runsc found the process gone, or the process it could not reach is a zombie
// or gone. Both without starting a process: under load 8-9 on 2 cores a runsc process
// took 0.2-0.6 s, and the runsc state that Exited runs after a SIGKILL that failed so
// was cut by the deadline, the sandbox, a zombie since its SIGTERM, ending "unknown"
// (row 810); so was the one after a wait that failed so, the wait after SIGTERM then
// ending without the exit it had been told of (row 831). The words are runsc's stderr,
// read whether or not another reaper took the command's exit status (row 835). A PID
// that now names another process (reused once reaped) is not a zombie: the answer is
// no, and Exited is asked as before.
func sandboxGone(err error) bool {
	msg := err.Error()
	if strings.Contains(msg, notRunning) || strings.Contains(msg, noLongerRunning) {
		return true
	}
	return controlServerGone(msg)
}

// controlServerGone reports whether msg, a runsc command's failure, names the PID of a
// control server runsc could not reach, and the kernel says that process is a zombie or
// gone: the sandbox had exited, and the command reached nothing in it.
func controlServerGone(msg string) bool {
	m := controlServerPID.FindStringSubmatch(msg)
	if m == nil {
		return false
	}
	pid, perr := strconv.Atoi(m[1])
	if perr != nil || pid <= 0 {
		return false
	}
	st, serr := procstat.Read(pid)
	return errors.Is(serr, fs.ErrNotExist) || serr == nil && (st.State == 'Z' || st.State == 'X')
}

// zombiePoll is how often a wait looks for the sandbox's zombie: a read of
// /proc/PID/stat, no process started.
const zombiePoll = 50 * time.Millisecond

// zombie reports whether process pid has exited and waits to be reaped (state Z, or X
// while it is being reaped). A process that is gone entirely is not reported: runsc
// itself reports that one stopped.
func zombie(pid int) bool {
	st, err := procstat.Read(pid)
	return err == nil && (st.State == 'Z' || st.State == 'X')
}
