package kubeletsim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// MinimumGracePeriod is the kubelet's minimumGracePeriodInSeconds: the time
// left after a hook is never below it.
const MinimumGracePeriod = 2 * time.Second

// A Hook is a preStop hook. Like the kubelet, the simulator never cancels
// a hook: it stops waiting for it once the grace period is used up and goes
// on to SIGTERM while the hook runs on. The hook's ctx ends only once the
// process has exited, as a real hook ends then (an httpGet fails with EOF,
// an exec dies with its container). Run must return when ctx ends.
type Hook interface {
	Run(ctx context.Context) error
}

// HookFunc adapts a function to a Hook.
type HookFunc func(ctx context.Context) error

// Run calls f(ctx).
func (f HookFunc) Run(ctx context.Context) error { return f(ctx) }

// A Process is what Terminate terminates.
type Process interface {
	// Signal delivers sig (SIGTERM) to the container's main process.
	Signal(sig os.Signal) error
	// Kill SIGKILLs every process of the container, those that left
	// its process group or daemonized included.
	Kill() error
	// Exited is closed when the main process has exited.
	Exited() <-chan struct{}
}

// An Event is one moment of the timeline.
type Event struct {
	At   time.Time `json:"at"`   // when it happened
	What string    `json:"what"` // what happened, for people
}

// A Timeline is what happened during one termination.
type Timeline struct {
	Grace time.Duration `json:"grace_ns"` // the pod's grace period
	// Start is T0: when the hook started, or SIGTERM when there was none.
	Start   time.Time `json:"start"`
	HookEnd time.Time `json:"hook_end,omitzero"`    // when the hook returned or was given up on
	HookErr string    `json:"hook_error,omitempty"` // why the hook failed
	// HookStatus is the HTTP status an httpGet hook was answered with
	// (the last call's, after a restart); zero for other hooks.
	// The kubelet does not check it: a 404 is no failed hook.
	HookStatus int  `json:"hook_status,omitempty"`
	HookKept   bool `json:"hook_overran,omitempty"` // the hook used the whole grace period
	// Restart is when the kubelet restarted (TerminateRestarted) and began
	// the termination again with RestartGrace, running the hook again.
	Restart      time.Time     `json:"restart,omitzero"`
	RestartGrace time.Duration `json:"restart_grace_ns,omitempty"`
	SIGTERM      time.Time     `json:"sigterm"` // when SIGTERM was sent (or due, to a process already gone)
	// Remaining is what the kubelet left between SIGTERM and SIGKILL:
	// grace - trunc(hook elapsed), at least MinimumGracePeriod (after a
	// restart: RestartGrace - trunc(time since Restart)).
	Remaining time.Duration `json:"remaining_ns"`
	// KillDue is when SIGKILL was due: SIGTERM + Remaining.
	KillDue time.Time `json:"kill_due"`
	// Exit is when the main process exited.
	Exit time.Time `json:"exit"`
	// Killed reports whether SIGKILL had to be sent.
	Killed bool    `json:"killed"`
	Events []Event `json:"events"` // every step, in time order
}

// Headroom is how long before the SIGKILL was due the process exited;
// negative when it had to be killed.
func (t *Timeline) Headroom() time.Duration { return t.KillDue.Sub(t.Exit) }

// String renders the timeline relative to T0, one event a line.
func (t *Timeline) String() string {
	var b strings.Builder
	for _, e := range t.Events {
		fmt.Fprintf(&b, "%10s  %s\n", e.At.Sub(t.Start).Round(time.Millisecond), e.What)
	}
	return b.String()
}

// event records what happens now.
func (t *Timeline) event(format string, args ...any) { t.eventAt(time.Now(), format, args...) }

// eventAt records what happened at, in time order among the events: a
// moment learnt late (an exit seen while a kill was still under way) goes
// before the later ones already recorded.
func (t *Timeline) eventAt(at time.Time, format string, args ...any) {
	i := len(t.Events)
	for i > 0 && t.Events[i-1].At.After(at) {
		i--
	}
	t.Events = slices.Insert(t.Events, i, Event{At: at, What: fmt.Sprintf(format, args...)})
}

// Remaining returns what the kubelet leaves between SIGTERM and SIGKILL
// after a preStop hook that ran for hookElapsed: the grace period minus the
// elapsed time truncated to whole seconds (int64(elapsed.Seconds())), and
// at least MinimumGracePeriod.
//
// It is written from the kubelet's code on purpose, not as a call to
// deadline.KubeletRemaining: the simulator is the kubelet that drainkit's
// budget is tested against, so it must not share the budget's arithmetic.
func Remaining(grace, hookElapsed time.Duration) time.Duration {
	left := grace - time.Duration(int64(hookElapsed.Seconds()))*time.Second
	return max(left, MinimumGracePeriod)
}

// A KubeletRestart is the kubelet restarting while it terminates a pod (an
// upgrade, a crash, a node agent restarting it): the new kubelet finds the
// pod terminating and begins its termination again, with the grace period
// it reads from the pod, the first one, or a shorter one when the pod was
// deleted again with `kubectl delete --grace-period=N` (a second deletion
// alone changes nothing: the running kubelet keeps the grace it started
// with).
type KubeletRestart struct {
	After time.Duration // when it restarts, since T0; the preStop hook still runs then
	Grace time.Duration // the grace the new kubelet reads: at most the first
}

// Terminate terminates p as the kubelet does with grace period grace and
// preStop hook hook (nil for none), and returns the timeline once p has
// exited and the hook has returned. What SIGTERM leaves is Remaining's
// arithmetic, with or without a hook (without one, a grace of 1 s still
// leaves the 2 s floor). A hook that overruns the grace period is not
// cancelled: its ctx ends when p has exited. A process that exits during
// the hook (a crash) ends the hook's ctx then, as a real hook dies with its
// container, and the kubelet goes on at once; no SIGTERM is sent to it and
// Exit is when it exited. ctx bounds only the waits after SIGKILL (for the
// exit, then for the hook); Terminate returns ctx's error if either does
// not end even then.
func Terminate(ctx context.Context, p Process, hook Hook, grace time.Duration) (*Timeline, error) {
	return terminate(ctx, p, hook, grace, KubeletRestart{})
}

// TerminateRestarted is Terminate with the kubelet restarting while the
// preStop hook runs: the first call ends with the kubelet that made it (an
// httpGet's connection closes, an exec's CRI call is cancelled), the new
// kubelet runs the hook again and times restart.Grace from that second
// start. (A second deletion without a restart is Terminate: the kubelet
// v1.34.4 keeps the grace its termination started with and runs no hook
// again, measured by internal/realkubelet's
// TestRealKubeletWithAPIServer/shorter_deletion.) It fails if the hook has
// already returned at T0 + restart.After (the new kubelet would then send
// SIGTERM again, which the simulator does not model), and, before it
// starts, unless there is a hook and 0 < restart.After < grace and
// 0 < restart.Grace <= grace.
func TerminateRestarted(ctx context.Context, p Process, hook Hook, grace time.Duration, restart KubeletRestart) (*Timeline, error) {
	if hook == nil || restart.Grace <= 0 || restart.Grace > grace || restart.After <= 0 || restart.After >= grace {
		return nil, fmt.Errorf("kubeletsim: KubeletRestart{After: %v, Grace: %v} needs a hook, 0 < After < grace %v and 0 < Grace <= grace", restart.After, restart.Grace, grace)
	}
	return terminate(ctx, p, hook, grace, restart)
}

// terminate is Terminate, with a kubelet restart unless restart is zero.
func terminate(ctx context.Context, p Process, hook Hook, grace time.Duration, restart KubeletRestart) (*Timeline, error) {
	if grace <= 0 {
		return nil, errors.New("kubeletsim: grace must be positive")
	}
	t := &Timeline{Grace: grace, Start: time.Now(), Remaining: Remaining(grace, 0)}
	var status atomic.Int64 // an httpGet hook's (hookStatusKey)
	hookCtx, endHook := context.WithCancel(context.WithValue(context.Background(), hookStatusKey{}, &status))
	defer endHook()
	// The process can die before SIGTERM (a crash during the hook). The
	// hook ends with it, as a real one does, and its exit time is kept.
	exit := watchExit(p, endHook)
	defer exit.stop()
	var calls sync.WaitGroup
	if hook != nil {
		t.event("preStop hook started (grace %v)", grace)
		start, g := t.Start, grace
		firstCtx, endFirst := context.WithCancel(hookCtx)
		defer endFirst()
		first := startHook(firstCtx, hook, &calls)
		var (
			ended bool
			err   error
		)
		if restart.Grace != 0 {
			returned, firstErr := waitHook(first, restart.After)
			switch {
			case returned && !exit.seen():
				endHook()
				return t, fmt.Errorf("kubeletsim: the hook returned before the kubelet's restart at %v", restart.After)
			case returned: // the process died first: the new kubelet finds it gone
				ended, err = true, firstErr
			default:
				endFirst() // its caller is gone
				t.Restart, t.RestartGrace = time.Now(), restart.Grace
				t.event("the kubelet restarted: the first preStop call ended with it; the new kubelet runs the hook again with grace %v", restart.Grace)
				start, g = t.Restart, restart.Grace
				ended, err = waitHook(startHook(hookCtx, hook, &calls), g)
			}
		} else {
			ended, err = waitHook(first, g)
		}
		t.HookEnd = time.Now()
		if exit.seen() {
			t.eventAt(exit.at, "process exited during the preStop hook")
		}
		if !ended {
			t.HookKept = true
			err = fmt.Errorf("preStop hook did not finish within the grace period %v; the kubelet stops waiting (it does not cancel it)", g)
		}
		if err != nil {
			t.HookErr = err.Error()
			t.event("preStop hook ended: %v", err)
		} else {
			t.event("preStop hook returned after %v", t.HookEnd.Sub(start).Round(time.Millisecond))
		}
		if t.HookStatus = int(status.Load()); t.HookStatus != 0 && (t.HookStatus < 200 || t.HookStatus > 399) {
			t.event("preStop httpGet answered %d %s: the kubelet does not check the status", t.HookStatus, http.StatusText(t.HookStatus))
		}
		t.Remaining = Remaining(g, t.HookEnd.Sub(start))
	}
	exited, err := signalAndWait(ctx, t, p, exit)
	// The process is gone, and with it whatever the hook was talking to.
	endHook()
	if !exited {
		return t, err
	}
	hooksDone := make(chan struct{})
	go func() { calls.Wait(); close(hooksDone) }()
	select {
	case <-hooksDone:
		return t, nil
	case <-ctx.Done():
		return t, fmt.Errorf("kubeletsim: preStop hook still running after the process exited: %w", ctx.Err())
	}
}

// startHook runs one call of the hook with ctx; its result arrives on the
// channel returned.
func startHook(ctx context.Context, hook Hook, calls *sync.WaitGroup) <-chan error {
	res := make(chan error, 1)
	calls.Go(func() { res <- hook.Run(ctx) })
	return res
}

// waitHook waits at most d for a hook call. Like the kubelet (a time.After
// beside the hook, whose request has no context and whose client no
// timeout), it then stops waiting and lets the call run on. It reports
// whether the call returned, and what it returned.
func waitHook(res <-chan error, d time.Duration) (bool, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case err := <-res:
		return true, err
	case <-timer.C:
		return false, nil
	}
}

// exitWatch records when a process exited, whenever that is.
type exitWatch struct {
	exited chan struct{} // closed once at is set
	at     time.Time
	done   chan struct{}
}

// watchExit watches p until stop: at p's exit it records the time and
// calls then.
func watchExit(p Process, then func()) *exitWatch {
	w := &exitWatch{exited: make(chan struct{}), done: make(chan struct{})}
	go func() {
		select {
		case <-p.Exited():
			w.at = time.Now()
			close(w.exited)
			then()
		case <-w.done:
		}
	}()
	return w
}

// seen reports whether the process has exited.
func (w *exitWatch) seen() bool {
	select {
	case <-w.exited:
		return true
	default:
		return false
	}
}

func (w *exitWatch) stop() { close(w.done) }

// signalAndWait sends SIGTERM, waits the remaining grace for p's exit, then
// SIGKILLs it and waits bounded by ctx. It reports whether p exited.
func signalAndWait(ctx context.Context, t *Timeline, p Process, exit *exitWatch) (bool, error) {
	t.SIGTERM = time.Now()
	t.KillDue = t.SIGTERM.Add(t.Remaining)
	if exit.seen() {
		t.event("SIGTERM not sent: the process has already exited")
	} else if err := p.Signal(syscall.SIGTERM); err != nil {
		t.event("SIGTERM failed: %v", err)
	} else {
		t.event("SIGTERM (SIGKILL due in %v)", t.Remaining)
	}
	timer := time.NewTimer(t.Remaining)
	defer timer.Stop()
	select {
	case <-exit.exited:
		t.Exit = exit.at
		t.eventAt(t.Exit, "process exited, %v before SIGKILL", t.Headroom().Round(time.Millisecond))
		// The container stops: whatever is left in it dies, or the
		// timeline says it may not have.
		stopped := time.Now()
		if err := p.Kill(); err != nil {
			t.eventAt(stopped, "SIGKILL to the rest of the container failed: %v", err)
		}
		return true, nil
	case <-timer.C:
	}
	t.Killed = true
	// The SIGKILL is when it was sent: the runtime's kill returns only
	// once the container is gone, or gave up, after the exit it caused.
	sent := time.Now()
	if err := p.Kill(); err != nil {
		t.eventAt(sent, "SIGKILL failed: %v", err)
	} else {
		t.eventAt(sent, "SIGKILL to the container")
	}
	select {
	case <-exit.exited:
		t.Exit = exit.at
		t.eventAt(t.Exit, "process exited after SIGKILL")
		return true, nil
	case <-ctx.Done():
		return false, fmt.Errorf("kubeletsim: process still running after SIGKILL: %w", ctx.Err())
	}
}

// InProcess is a Process for code running in the test's own process, for
// example under testing/synctest: SIGTERM arrives on Signals, SIGKILL closes
// Killed, and the code calls Exit when it is done. Code under test must
// stop acting once Killed is closed: that is what a SIGKILL would do.
type InProcess struct {
	sigs   chan os.Signal
	killed chan struct{}
	exited chan struct{}
	once   sync.Once
	kill   sync.Once
}

// NewInProcess returns an InProcess process.
func NewInProcess() *InProcess {
	return &InProcess{sigs: make(chan os.Signal, 4), killed: make(chan struct{}), exited: make(chan struct{})}
}

// Signals delivers the signals Terminate sends, for drain.Drainer.ServeSignals.
func (p *InProcess) Signals() <-chan os.Signal { return p.sigs }

// Killed is closed by SIGKILL.
func (p *InProcess) Killed() <-chan struct{} { return p.killed }

// Exit marks the process exited. Calling it again has no effect.
func (p *InProcess) Exit() { p.once.Do(func() { close(p.exited) }) }

// Signal queues sig on Signals.
func (p *InProcess) Signal(sig os.Signal) error {
	select {
	case p.sigs <- sig:
		return nil
	default:
		return errors.New("kubeletsim: signal queue full")
	}
}

// Kill closes Killed; a killed in-process process counts as exited.
func (p *InProcess) Kill() error {
	p.kill.Do(func() { close(p.killed) })
	p.Exit()
	return nil
}

// Exited is closed by Exit or Kill.
func (p *InProcess) Exited() <-chan struct{} { return p.exited }

// HandlerHook is an httpGet hook served in-process: it calls Handler with a
// GET to Path, as the kubelet's request would arrive, without a network, so
// it runs under testing/synctest.
type HandlerHook struct {
	Handler http.Handler // the server's preStop handler
	Path    string       // the request path, e.g. /drain
}

// Run serves the request, bounded by ctx (the request's context).
func (h HandlerHook) Run(ctx context.Context) error {
	rec := httptest.NewRecorder()
	h.Handler.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, h.Path, nil))
	recordStatus(ctx, rec.Code)
	return ctx.Err()
}

// hookStatusKey is the context key under which Terminate gives a hook the
// *atomic.Int64 an httpGet hook records its status in. The kubelet does not
// check the status (runHTTPHandler in pkg/kubelet/lifecycle/handlers.go
// returns only the transport's error), so it is not the hook's error; a
// test still wants to see a hook answered 404.
type hookStatusKey struct{}

func recordStatus(ctx context.Context, code int) {
	if s, ok := ctx.Value(hookStatusKey{}).(*atomic.Int64); ok {
		s.Store(int64(code))
	}
}
