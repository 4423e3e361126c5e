package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/drain/draingrpc"
	"github.com/drainkit/drainkit/examples/internal/podstart"
	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/internal/durflag"
	"github.com/drainkit/drainkit/internal/kubeletconf"
	"github.com/drainkit/drainkit/internal/lastreport"
	"github.com/drainkit/drainkit/internal/learned"
	"github.com/drainkit/drainkit/internal/listenaddr"
	"github.com/drainkit/drainkit/internal/startsig"
	"github.com/drainkit/drainkit/internal/statedir"
	"github.com/drainkit/drainkit/internal/termmsg"
	"github.com/drainkit/drainkit/kube"
	"github.com/drainkit/drainkit/pause"
	"github.com/drainkit/drainkit/pause/escalate"
)

// config is the worker's command line.
type config struct {
	Socket string
	// Listen, set, is a TCP address to serve gRPC on instead of Socket (-listen): under
	// gVisor a Unix socket on a hostPath is the sandbox's own, out of the host's reach.
	Listen   string
	StateDir string
	Grace    time.Duration
	// Concurrency is how many checkpoints run at once at shutdown (-concurrency): n > 0
	// fixes it; 0, the default, lets pause's adaptive limit find it (between 1 and
	// maxConcurrency), from the level the last shutdown learned (STATE_DIR/learned-rates.json),
	// which its first epoch checks against the estimate that level was learned with.
	Concurrency  int
	Runtime      string
	PauseLatency time.Duration
	// TerminationLog is where the drain's summary goes at exit (-termination-log, else
	// $DRAINKIT_TERMINATION_LOG, else /dev/termination-log when the kubelet mounted it).
	TerminationLog string
	// Pod is this pod's name in the Kubernetes API (-pod, default $POD_NAME from the
	// Downward API): the drain reads its deletionTimestamp (kubectl delete
	// --grace-period, an eviction: a grace shorter than -grace) and posts its Events on
	// it. Empty: no API access, -grace stands.
	Pod string
	// PodUID is this pod's metadata.uid (-pod-uid, default $POD_UID from the Downward API):
	// a pod of the same name with another UID (this one force-deleted, a StatefulSet's new
	// one created) is not read as this one's deletion, and Events name this pod. Empty:
	// learned from the first read.
	PodUID string
	// KubeletGrace is the grace the kubelet gives the pod when it stops it on its own, with
	// no deletionTimestamp (-kubelet-grace): graceful node shutdown's slice for the pod's
	// priority, a soft eviction's evictionMaxPodGracePeriod. With -pod, a SIGTERM read that
	// finds no deletionTimestamp moves SIGKILL to SIGTERM + it (drain.Config.KubeletGrace).
	// Zero: not known, -grace stands.
	KubeletGrace time.Duration
	// KubeletConfig is the node's KubeletConfiguration (-kubelet-config, the kubelet's
	// --config file mounted from the host), from which KubeletGrace is computed for this
	// pod's priority as the kubelet does; not with -kubelet-grace.
	KubeletConfig string
	// Kube reaches the API server; its zero value is the pod's mounted service account.
	// No flag sets it: the tests' API server on loopback.
	Kube kube.Config
	// exits is Main's: the process exits once Main returns, so SIGTERM stays caught from
	// the Catcher's start until the exit (startsig.KeepUntilExit). No flag sets it.
	exits bool
}

func parseFlags(args []string, output io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("gvisor-worker", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&c.Socket, "socket", "", "Unix socket to serve gRPC on (default STATE_DIR/worker.sock)")
	fs.StringVar(&c.Listen, "listen", "", "TCP address to serve gRPC on instead of -socket, e.g. 127.0.0.1:7070")
	fs.StringVar(&c.StateDir, "state-dir", "", "directory for sandboxes, checkpoints and records (required)")
	durflag.GraceVar(fs, &c.Grace, "grace", 30*time.Second, "the pod's termination grace period")
	fs.IntVar(&c.Concurrency, "concurrency", 0, "checkpoints run at once at shutdown: n > 0 fixes it; 0 (the default) adapts, between 1 and 32, from what the last shutdown learned ("+learned.File+" in -state-dir)")
	fs.StringVar(&c.Runtime, "runtime", "runsc", "runsc, or fake for in-process sandboxes")
	durflag.DurationVar(fs, &c.PauseLatency, "pause-latency", 2*time.Second, "how long a fake checkpoint takes; with runsc, the first estimate")
	fs.StringVar(&c.Pod, "pod", os.Getenv(drain.EnvPodName), "this pod's name, for its deletionTimestamp (a grace shorter than -grace) and Events through the Kubernetes API (needs get on pods and create on events.k8s.io events); empty: no API access")
	fs.StringVar(&c.PodUID, "pod-uid", os.Getenv(drain.EnvPodUID), "this pod's metadata.uid (Downward API), so that a new pod of its name is not taken for it; empty: learned from the first read")
	durflag.GraceVar(fs, &c.KubeletGrace, "kubelet-grace", 0, "the grace the kubelet gives this pod when it stops it on its own (graceful node shutdown's slice, with no deletionTimestamp), in `seconds` or as a duration (25s); needs -pod; not given: not known")
	fs.StringVar(&c.KubeletConfig, "kubelet-config", "", "the node's KubeletConfiguration `FILE` (the kubelet's --config, mounted from the host): -kubelet-grace computed from it for this pod's priority; needs -pod")
	fs.StringVar(&c.TerminationLog, "termination-log", "", "file for the drain's summary at exit, the pod's terminationMessagePath (default: $"+termmsg.EnvPath+", else "+termmsg.DefaultPath+" if it exists)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.Socket == "" && c.StateDir != "" {
		c.Socket = filepath.Join(c.StateDir, "worker.sock")
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case c.StateDir == "":
		return c, errors.New("-state-dir is required")
	case c.Grace < 2*time.Second:
		return c, fmt.Errorf("-grace %v is below the kubelet's 2 s minimum", c.Grace)
	case c.KubeletGrace < 0:
		return c, fmt.Errorf("-kubelet-grace %v is negative (0: not known)", c.KubeletGrace)
	case c.Concurrency < 0:
		return c, fmt.Errorf("-concurrency %d is negative (0 adapts)", c.Concurrency)
	case c.Runtime != "runsc" && c.Runtime != "fake":
		return c, fmt.Errorf("-runtime %q: want runsc or fake", c.Runtime)
	case c.PauseLatency <= 0:
		return c, fmt.Errorf("-pause-latency %v is not positive", c.PauseLatency)
	}
	if c.Listen != "" {
		// A port no listener can have (":99999") failed at net.Listen, once the state
		// directory was locked and the runtime started, exit 1 as if the machine refused
		// it (docs/faults.md row 1322, as row 1241 for the other programs).
		if err := listenaddr.Check(c.Listen); err != nil {
			return c, fmt.Errorf("-listen %s %w", c.Listen, err)
		}
	}
	return c, nil
}

// classList is the admission class of List: read-only, never refused.
const classList drain.Class = "list"

// clamp keeps d within [lo, hi].
func clamp(d, lo, hi time.Duration) time.Duration { return min(max(d, lo), hi) }

// grpcReserve is the grpc step's reserve: a fortieth of the grace, 0.5–5 s.
func (w *Worker) grpcReserve() time.Duration {
	return clamp(w.cfg.Grace/40, 500*time.Millisecond, 5*time.Second)
}

// A Worker serves gRPC on a Unix socket over its sandboxes, and takes them through the
// pod's termination with drainkit.
type Worker struct {
	cfg      config
	logger   *slog.Logger
	node     *sandbox.Node
	rt       sandbox.Runtime
	grpc     *grpc.Server
	drainer  *drain.Drainer
	progress *lastreport.Progress // this drain's account while it runs
	ln       net.Listener
	// signals holds the SIGTERM and SIGINT from newWorker's first moment until close: one
	// that comes while the worker starts (its lock, its sandboxes' records, the orphans'
	// sweep) drains once it has.
	signals *startsig.Catcher
	// lock makes the state directory this process's alone until close.
	lock *statedir.Lock
	// learned is the start from what the last shutdown learned, and saves what this
	// one learns; steps are the teardown steps, whose reserves it saves.
	learned *learned.Start
	steps   []drain.Step
	est     *deadline.Estimator // the Preserver's: it starts from what was learned
	// stops are the escalations, each a sandbox's SIGTERM, wait and SIGKILL: those begun
	// at the preserve phase's deadline (escalateEarly) and the escalate step's.
	stops stops
	// preserveOver is how the last run of the preserve phase ended, at its deadline or
	// by force (preserver.Run), nil before: from then no Checkpoint RPC starts
	// (checkpointTooLate), unless the budget moves SIGKILL later than it was as that run
	// began, which runs the phase again (never after force).
	preserveOver atomic.Pointer[phaseEnd]
}

// phaseEnd is how a run of the preserve phase ended: the budget's SIGKILL as the run
// began, and whether the drain was forced.
type phaseEnd struct {
	kill   time.Time
	forced bool
}

// stops holds, per sandbox ID, whether checkpoints of the Preserver's are in flight or the
// sandbox is signalled: never both, so that no sandbox is signalled while it is
// checkpointed, nor checkpointed once signalled.
type stops struct {
	mu sync.Mutex
	// checkpointing counts, per sandbox, the checkpoints of it in flight. More than one:
	// the Preserver abandons a checkpoint that outlives its hard deadline (runsc's runs on
	// whatever its context), and its next Run (the budget moved SIGKILL later) checkpoints
	// the sandbox again once that one has ended. A yes/no flag, cleared by the first end,
	// let an escalation signal the sandbox as the next checkpoint of it began (row 830).
	checkpointing map[string]*checkpoints
	signalled     map[string]bool
	// after holds, per sandbox an escalation found in its checkpoint, what is to be done
	// when the checkpoints of it in flight have all ended: escalate the sandbox if none
	// of them preserved it.
	after map[string][]func(failed bool)
	// errs holds each escalation's error, one a sandbox: the escalations at the preserve
	// phase's deadline and the escalate step's may both give up on the same checkpoint.
	errs map[string]error
	// saved holds, per sandbox, when a checkpoint of it last ended saving it: the exit's
	// account of the sandboxes a checkpoint the drain abandoned saved after the Report
	// (savedAfterDrain).
	saved map[string]time.Time
	// idle is closed, and dropped, when the last checkpoint in flight ends; nil while
	// none is in flight or no one waits (whenIdle).
	idle chan struct{}
	wg   sync.WaitGroup
	// early is the parent of the contexts of the escalations begun at the preserve phase's
	// deadline (escalateEarly), and cut ends it: the escalate step ends them with its own
	// (cutEarly).
	early context.Context
	cut   context.CancelFunc
}

// earlyParent returns the context the escalations begun at the preserve phase's deadline
// derive theirs from, which cutEarly ends.
func (s *stops) earlyParent() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.early == nil {
		s.early, s.cut = context.WithCancel(context.Background())
	}
	return s.early
}

// cutEarly ends the escalations begun at the preserve phase's deadline: their signals and
// waits, and their waits for checkpoints and transitions in flight.
func (s *stops) cutEarly() {
	s.earlyParent() // sets cut, under mu, once
	s.cut()
}

// checkpoints is what stops knows of the checkpoints of one sandbox in flight: how many,
// and whether one of those that ended since the first began preserved it.
type checkpoints struct {
	n         int
	preserved bool
	// waiting counts those of the n that have returned from their sandbox's Preserve
	// and wait for the others to record how they ended (preservedByOthers).
	waiting int
	// changed is closed, and dropped, when one of the n ends or begins to wait; nil while
	// no one waits.
	changed chan struct{}
}

// wake tells whoever waits in preservedByOthers that c changed. s.mu is held.
func (c *checkpoints) wake() {
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

// checkpoint marks a checkpoint of sandbox id in flight, unless it is signalled: began,
// and joined when another checkpoint of it was in flight already (one the Preserver
// abandoned).
func (s *stops) checkpoint(id string) (began, joined bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.signalled[id] {
		return false, false
	}
	if s.checkpointing == nil {
		s.checkpointing = map[string]*checkpoints{}
	}
	c := s.checkpointing[id]
	if c == nil {
		c = new(checkpoints)
		s.checkpointing[id] = c
	}
	c.n++
	return true, c.n > 1
}

// preservedByOthers reports whether a checkpoint of sandbox id that ended since the first
// of those in flight began preserved it, asked once every other checkpoint of it in flight
// has recorded how it ended, or has returned from the sandbox's Preserve and waits here
// too; when ctx ends first, what is recorded then. The caller's own checkpoint in flight
// keeps the account. A checkpoint that left the sandbox paused wakes the ones waiting for
// that (sandbox.Node.AwaitSettled) before its Preserve returns and it is recorded here:
// asked at once, the one that woke read the save as not yet made (row 3860). A waiter is
// never waited for: two would wait for each other.
func (s *stops) preservedByOthers(ctx context.Context, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.checkpointing[id]
	c.waiting++
	defer func() { c.waiting-- }()
	c.wake()
	for !c.preserved && c.n > c.waiting {
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		changed := c.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
		}
		s.mu.Lock()
		if ctx.Err() != nil {
			return c.preserved
		}
	}
	return c.preserved
}

// checkpointed marks a checkpoint of sandbox id over, failed or not. Once it was the last
// in flight, it calls what the escalations that found the sandbox checkpointing left for
// that end, with failed unless one of them preserved it: one that ended preserved leaves
// the sandbox paused, and a later one that finds it so fails with nothing to signal.
func (s *stops) checkpointed(id string, failed bool) {
	s.mu.Lock()
	c := s.checkpointing[id]
	c.n--
	c.preserved = c.preserved || !failed
	c.wake()
	if !failed {
		if s.saved == nil {
			s.saved = map[string]time.Time{}
		}
		s.saved[id] = time.Now()
	}
	if c.n > 0 {
		s.mu.Unlock()
		return
	}
	delete(s.checkpointing, id)
	after := s.after[id]
	delete(s.after, id)
	if len(s.checkpointing) == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
	s.mu.Unlock()
	for _, then := range after {
		then(!c.preserved)
	}
}

// claim is an escalation's claim on sandbox id. It marks the sandbox signalled and
// returns claimed, unless it is signalled already; while a checkpoint of it is in flight,
// it returns checkpointing and keeps what await makes, to be called when the checkpoints
// of it in flight have ended.
func (s *stops) claim(id string, await func() func(failed bool)) claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.signalled[id]:
		return signalled
	case s.checkpointing[id] != nil:
		s.awaitLocked(id, await())
		return checkpointing
	}
	if s.signalled == nil {
		s.signalled = map[string]bool{}
	}
	s.signalled[id] = true
	return claimed
}

// savedAt returns when a checkpoint of sandbox id last ended saving it, false when none
// did.
func (s *stops) savedAt(id string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.saved[id]
	return at, ok
}

// inFlightOf returns how many checkpoints of sandbox id are in flight.
func (s *stops) inFlightOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.checkpointing[id]; c != nil {
		return c.n
	}
	return 0
}

// inFlight returns the sandboxes a checkpoint of the Preserver's holds now.
func (s *stops) inFlight() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.checkpointing))
}

// whenIdle returns a channel closed once no checkpoint of the Preserver's is in flight:
// closed already when none is.
func (s *stops) whenIdle() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.checkpointing) == 0 {
		done := make(chan struct{})
		close(done)
		return done
	}
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	return s.idle
}

// await keeps then to be called when the checkpoints of sandbox id in flight have ended,
// and reports whether one was in flight.
func (s *stops) await(id string, then func(failed bool)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checkpointing[id] == nil {
		return false
	}
	s.awaitLocked(id, then)
	return true
}

// fail keeps the error of an escalation of sandbox id for the escalate step's, unless it
// has one for that sandbox already.
func (s *stops) fail(id string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errs == nil {
		s.errs = map[string]error{}
	}
	if s.errs[id] == nil {
		s.errs[id] = fmt.Errorf("%s: %w", id, err)
	}
}

// err joins the escalations' errors, in the order of their sandboxes' IDs.
func (s *stops) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(s.errs)) {
		errs = append(errs, s.errs[id])
	}
	return errors.Join(errs...)
}

func (s *stops) awaitLocked(id string, then func(failed bool)) {
	if s.after == nil {
		s.after = map[string][]func(bool){}
	}
	s.after[id] = append(s.after[id], then)
}

// claim is what stops.claim found.
type claim int

const (
	claimed       claim = iota // the escalation is to signal the sandbox
	signalled                  // another escalation has
	checkpointing              // a checkpoint is in flight: the end of the last in flight decides
)

// errSignalled is the Preserve error of a sandbox signalled before its checkpoint began.
var errSignalled = errors.New("not checkpointed: signalled at the preserve phase's deadline (the escalate step's SIGTERM, wait, SIGKILL)")

// held is a sandbox of the node as the Preserver sees it: its checkpoint is marked in
// flight in stops, and it is never checkpointed once signalled.
type held struct {
	pause.Sandbox
	w *Worker
}

// Size is the node's sandbox's size (pause.Sized).
func (h held) Size() int64 {
	if s, ok := h.Sandbox.(pause.Sized); ok {
		return s.Size()
	}
	return 0
}

// Preserve checkpoints the sandbox unless it was signalled first. A checkpoint that
// panics (pause recovers it, an error in the Report) ends as one that failed: left marked
// in flight, its sandbox was never signalled, the escalate step waiting to its deadline for
// an end that had passed (row 780).
//
// A started checkpoint is never cut (sandbox.Runsc.Pause: gVisor finishes the save
// whatever happens to its client), so Preserve returns at ctx's end, the Preserver's hard
// deadline, with the checkpoint still running, and leaves it to run on in a goroutine,
// marked in flight until it ends (stops). Its error says so and wraps ctx's, so that the
// Report has a checkpoint that was slow, not one that ignored its context: the Preserver
// abandoned it, and the drain called it "a hang, not a slow preserve", to be bounded with
// Config.Pause.SandboxTimeout, which only gives up sooner on what cannot be cut. How long
// it had run then, when longer than the estimate, is a time a checkpoint takes at least,
// observed by the Preserver's Estimator, which learned nothing from it: on a node where
// checkpoints outlast the phase, every shutdown planned with the estimate the last one
// had and lost the same sandboxes (row 1072).
func (h held) Preserve(ctx context.Context) error {
	began, joined := h.w.stops.checkpoint(h.ID())
	if !began {
		return backoff.Permanent(errSignalled) // the Report names the sandbox
	}
	start := time.Now()
	ended := make(chan checkpointEnd, 1)
	go func() {
		end := checkpointEnd{err: errors.New("checkpoint: did not return")}
		defer func() {
			if v := recover(); v != nil {
				end = checkpointEnd{err: fmt.Errorf("checkpoint panicked: %v", v), panicked: v, stack: debug.Stack()}
			}
			h.w.stops.checkpointed(h.ID(), end.err != nil)
			ended <- end
		}()
		err := h.Sandbox.Preserve(ctx)
		preserveReturnedHook(joined)
		end.err = h.preservedLate(ctx, joined, err)
	}()
	select {
	case end := <-ended:
		return end.result()
	case <-ctx.Done():
	}
	select {
	case end := <-ended: // it ended as ctx did
		return end.result()
	default:
	}
	ran := time.Since(start)
	if ran > h.w.est.Estimate() {
		// It takes at least ran, longer than the estimate: the Estimator's only word of
		// it. A shorter run (begun late, or a budget that moved SIGKILL earlier cut it)
		// says nothing of how long one takes, and would pull the estimate down.
		h.w.est.Observe(ran)
	}
	go func() {
		end := <-ended
		attrs := []any{"id", h.ID(), "after", time.Since(start).Round(time.Millisecond)}
		switch {
		case end.panicked != nil:
			h.w.logger.Error("checkpoint the drain no longer waited for panicked", append(attrs, "error", end.err, "stack", string(end.stack))...)
		case end.err != nil:
			h.w.logger.Warn("checkpoint the drain no longer waited for failed", append(attrs, "error", end.err)...)
		default:
			h.w.logger.Info("checkpoint the drain no longer waited for ended: the sandbox is paused and recorded", attrs...)
		}
	}()
	return fmt.Errorf("%w after %v: its checkpoint still runs (a started checkpoint is never cut), not waited for",
		context.Cause(ctx), ran.Round(time.Millisecond))
}

// preservedLate is the Preserve error err of the held sandbox, nil when a checkpoint of
// it the drain abandoned earlier was still in flight as this one began (joined) and has
// since saved it: this one then found the sandbox pausing, waited, and found it paused,
// "already preserved" (pause.ErrGone), which the Report took for vanished, as of a
// sandbox that had died, when the drain's own checkpoint had preserved it, late. Its
// entry, the one of a later Run the drain merges over the abandoned one's, says
// preserved, counted once.
func (h held) preservedLate(ctx context.Context, joined bool, err error) error {
	if !joined || !errors.Is(err, pause.ErrGone) || !h.w.stops.preservedByOthers(ctx, h.ID()) {
		return err
	}
	h.w.logger.Info("sandbox preserved by the checkpoint the drain abandoned earlier, which ended while a later one waited for it",
		"id", h.ID(), "error", err)
	return nil
}

// checkpointEnd is how the checkpoint of a held sandbox ended: err, and the value and
// stack of a panic.
type checkpointEnd struct {
	err      error
	panicked any
	stack    []byte
}

// result is Preserve's return for a checkpoint that ended while Preserve waited: err, or
// the panic again, for pause to recover and report.
func (e checkpointEnd) result() error {
	if e.panicked != nil {
		panic(fmt.Sprintf("%v\n\ncheckpoint goroutine's stack:\n%s", e.panicked, e.stack))
	}
	return e.err
}

// running is the Preserver's Lister: the node's running sandboxes, held.
func (w *Worker) running(ctx context.Context) ([]pause.Sandbox, error) {
	listHook()
	sbs, err := w.node.Running(ctx)
	for i, sb := range sbs {
		sbs[i] = held{Sandbox: sb, w: w}
	}
	return sbs, err
}

// preserver is the worker's Preserver: pause's, whose Run also begins the escalations of
// the sandboxes it will not checkpoint when the preserve phase's deadline passes
// (escalateEarly), not once its checkpoints still in flight then have ended.
type preserver struct {
	*pause.Preserver
	w *Worker
}

// Run runs pause's Preserver; at ctx's end (the phase's deadline, or an earlier one a
// budget that moved SIGKILL earlier gives it) before Run returns, the escalations begin.
// Run returns once they have begun, so that the escalate step finds them. They do not
// begin when the budget's SIGKILL is later than when Run began: the preserve phase runs
// the Preserver again until its new deadline (a restarted kubelet's hook call,
// Budget.OnRestart), and that run is to checkpoint these sandboxes, which a signal would
// lose; nor at force, after which the escalate step gets its reserve from its start and
// the early escalations would outrun it. The escalate step signals whatever is left.
func (p preserver) Run(ctx context.Context, hard time.Time) *pause.Report {
	if rs, ok := p.w.rt.(*sandbox.Runsc); ok {
		// The drain signals what it could not checkpoint: a checkpoint that would
		// fail for want of space, and stop its sandbox, is not started (row 414).
		rs.SpareOnFullVolume()
	}
	budget := p.w.drainer.Budget()
	kill := budget.Kill()
	begun := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(begun)
		forced := errors.Is(context.Cause(ctx), drain.ErrForced)
		if !forced && budget.Kill().After(kill) {
			return
		}
		p.w.preserveOver.Store(&phaseEnd{kill: kill, forced: forced})
		if !forced {
			p.w.escalateEarly(kill)
		}
	})
	defer func() {
		if !stop() {
			<-begun
		}
	}()
	return p.Preserver.Run(ctx, hard)
}

// startingHook is a test's: it holds newWorker once its sandboxes are loaded, for a
// SIGTERM then.
var startingHook = func() {}

// serveHook is a test's: it holds serve's goroutine before it calls Serve.
var serveHook = func(*Worker) {}

// preserveReturnedHook is a test's: it holds a checkpoint once its sandbox's Preserve has
// returned, before it is recorded; joined as stops.checkpoint said.
var preserveReturnedHook = func(joined bool) {}

// listHook is a test's: it holds the Preserver's listing before it reads the node.
var listHook = func() {}

// reportFile is the file in the state directory that the shutdown Report is written to.
const reportFile = "last-shutdown.json"

// maxConcurrency is the ceiling of the adaptive limit (-concurrency 0): pause's own.
const maxConcurrency = 32

// newWorker loads the checkpointed sandboxes, builds the Drainer and listens.
func newWorker(cfg config, logger *slog.Logger) (*Worker, error) {
	w := &Worker{cfg: cfg, logger: logger, signals: startsig.Catch(logger, "the worker")}
	if cfg.exits {
		// close stops the Catcher before the exit, and a SIGTERM between the two (the
		// kubelet's again) had its default action: status 143 where the drain went well,
		// or, after a start that failed, no termination message (docs/faults.md row 1116).
		startsig.KeepUntilExit()
	}
	if err := w.open(); err != nil {
		w.close(nil)
		return nil, err
	}
	return w, nil
}

func (w *Worker) open() (err error) {
	// The lock before anything else in the directory, the socket included: a worker
	// started while the one before it still checkpoints into the directory (a rolling
	// update with maxSurge, a pod started before the last one has ended) waits here,
	// saying for whom, with nothing touched and no socket served, until that one exits;
	// then it takes over what it left. Its own SIGTERM while it waits ends the wait:
	// newWorker fails and Main exits 1.
	lockCtx, unlock := w.signals.Context(context.Background())
	w.lock, err = statedir.Acquire(lockCtx, w.cfg.StateDir, statedir.Config{Logger: w.logger})
	unlock()
	if err != nil {
		return err
	}
	// A Report write an earlier worker's SIGKILL cut short left its temporary file, which
	// no later write reuses; under the lock no other worker writes the Report.
	w.lock.RemoveTemps(reportFile, w.logger)
	st, err := store.Open(filepath.Join(w.cfg.StateDir, "records"))
	if err != nil {
		return err
	}
	if w.rt, err = sandbox.NewRuntime(w.cfg.Runtime, w.cfg.StateDir, w.cfg.PauseLatency, 0); err != nil {
		return fmt.Errorf("-runtime %s: %w", w.cfg.Runtime, err)
	}
	if w.node, _, err = sandbox.NewNode(w.rt, st, w.logger); err != nil {
		return err
	}
	// A checkpoint the last worker left running at its exit (its wait for the ones its
	// drain abandoned gave up) saves a sandbox that has no record yet: waited for and
	// recorded, not swept mid-save (row 3422). Its own SIGTERM ends the wait, the start
	// failed and nothing swept; so does its grace, after which one that hangs is left
	// to the next worker and this one serves (row 3542).
	adoptCtx, stopAdopt := w.signals.Context(context.Background())
	err = w.node.AdoptCheckpoints(adoptCtx, filepath.Join(w.cfg.StateDir, "records"), w.cfg.Grace, w.logger)
	stopAdopt()
	if err != nil {
		return err
	}
	// What a checkpoint cut by the last worker's SIGKILL half wrote, and the bundles of
	// the sandboxes it lost running (row 174): under the lock, before any create.
	w.node.SweepOrphans(filepath.Join(w.cfg.StateDir, "records"), w.logger)
	startingHook()
	gate := &drain.Gate{Exempt: []drain.Class{drain.Checkpoint, classList}}
	classify := draingrpc.Methods(map[string]drain.Class{
		MethodRun:        drain.Create,
		MethodRestore:    drain.Resume,
		MethodCheckpoint: drain.Checkpoint,
		MethodList:       classList,
	}, drain.Create)
	// Both interceptors, though the worker's own methods are unary: the
	// grpc step tells a connection closed at its deadline with no RPC on
	// it from one that cut an RPC only when they see every RPC (a
	// reflection or health stream, any stream a later method adds).
	// A connection still in its HTTP/2 handshake holds GracefulStop, and Stop, until
	// the connection timeout (120 s by default): the grpc step would wait for it to
	// its deadline and leave Stop running (draingrpc.Stop). A handshake on the
	// worker's socket takes microseconds; half the step's reserve ends one that
	// stalls before the step does.
	w.grpc = grpc.NewServer(grpc.ForceServerCodec(jsonCodec{}),
		grpc.ConnectionTimeout(w.grpcReserve()/2),
		grpc.ChainUnaryInterceptor(w.restoreRefused, draingrpc.UnaryServerInterceptor(gate, classify)),
		grpc.ChainStreamInterceptor(draingrpc.StreamServerInterceptor(gate, classify)))
	w.grpc.RegisterService(&serviceDesc, w)
	if err := w.buildDrainer(gate); err != nil {
		return err
	}
	if w.cfg.Listen != "" {
		if w.ln, err = net.Listen("tcp", w.cfg.Listen); err != nil {
			return fmt.Errorf("-listen: %w", err)
		}
		return nil
	}
	if err := removeStaleSocket(w.cfg.Socket); err != nil {
		return fmt.Errorf("-socket: %w", err)
	}
	if w.ln, err = listenUnix(w.cfg.Socket); err != nil {
		return fmt.Errorf("-socket: %w", err)
	}
	return nil
}

// maxSocketPath is the longest path a Unix socket can be bound at on Linux: sun_path's
// 108 bytes, less the terminating NUL.
const maxSocketPath = 107

// listenUnix listens on a Unix socket at path that appears there only once it accepts
// connections: it binds and listens at a hidden name beside path (".BASE.new"), then
// renames it to path, which replaces a stale socket atomically. Closing the listener
// removes path.
//
// net.Listen binds (which creates the file) and then listens, two system calls: a client
// that took the file for the server (a test waiting for it, a script, a probe that tests
// for it) and connected in between was refused, "connect: connection refused", on a
// loaded node where the worker's thread can be descheduled between the two.
func listenUnix(path string) (net.Listener, error) {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".new")
	if len(tmp) > maxSocketPath {
		return nil, fmt.Errorf("%s: too long for a Unix socket: with the name it is bound at before it listens (%s), %d bytes where at most %d fit",
			path, filepath.Base(tmp), len(tmp), maxSocketPath)
	}
	// One left by a worker killed between its bind and its rename; under the state
	// directory's lock no other worker of this directory is binding it.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false) // the name it would unlink is gone: path is, by Close
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	return &unixListener{UnixListener: ln, path: path}, nil
}

// unixListener is a listener from listenUnix, whose Close removes its socket.
type unixListener struct {
	*net.UnixListener
	path string
}

// Close closes the listener and removes its socket at path, as net.UnixListener's Close
// does at the name it bound.
func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// Addr returns the socket's address: path, not the name it was bound at.
func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// removeStaleSocket removes the socket at path that a killed worker left, which nobody
// listens on any more (a connection to it is refused). Anything else at path is an error
// and stays: a socket another process serves on (a second worker would have taken it
// from the first, whose sandboxes its clients could no longer reach), or a file that is
// not a socket.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode()&os.ModeSocket == 0:
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	switch {
	case err == nil:
		c.Close()
		return fmt.Errorf("%s: another process serves on it (a worker already running on this socket?)", path)
	case !errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s: not taken for a stale socket: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// buildDrainer wires the shutdown: at SIGTERM, checkpoint every live sandbox in parallel
// inside the budget, then signal-escalate whatever could not be checkpointed, then stop
// gRPC (GracefulStop, Stop at its deadline).
func (w *Worker) buildDrainer(gate *drain.Gate) error {
	budget, err := deadline.New(w.cfg.Grace, deadline.Config{}) // the margin scales with the grace
	if err != nil {
		return fmt.Errorf("-grace: %w", err)
	}
	pod := w.pod()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the pod's priority
	defer cancel()
	set := kubeletconf.Setting{GraceName: "-kubelet-grace", ConfigName: "-kubelet-config", Grace: w.cfg.KubeletGrace, Config: w.cfg.KubeletConfig}
	kubeletGrace, err := set.Resolve(ctx, pod, w.logger, "(-pod): only the pod's missing deletionTimestamp tells the kubelet's own termination from a deletion")
	if err != nil {
		return usageError{err}
	}
	w.steps = []drain.Step{
		drain.NewStep(deadline.Phase{Name: "escalate", Reserve: deadline.Fixed(clamp(w.cfg.Grace/20, 1500*time.Millisecond, 30*time.Second))},
			func(ctx context.Context) (any, error) { return nil, w.escalate(ctx) }),
		draingrpc.Step("grpc", w.grpc, gate, w.grpcReserve()),
	}
	build := func(pc pause.Config) error {
		w.est = pc.Estimator
		pc.Logger = w.logger
		p, err := pause.New(pause.ListFunc(w.running), pc) // a sandbox found dead is forgotten, said at WARN, by the node
		if err != nil {
			return fmt.Errorf("drain: Config.Pause: %w", err)
		}
		cfg := drain.Config{
			Budget:       budget,
			Gate:         gate,
			Sandboxes:    pause.ListFunc(w.running),
			Preserver:    preserver{Preserver: p, w: w},
			Steps:        w.steps,
			Logger:       w.logger,
			Pod:          pod,
			KubeletGrace: kubeletGrace,
		}
		// This drain's account from its start, so that a SIGKILL mid-drain leaves it,
		// unfinished, rather than an earlier drain's Report (docs/faults.md row 1512).
		w.progress = lastreport.Follow(&cfg, filepath.Join(w.cfg.StateDir, reportFile), 0o600, w.logger,
			lastreport.ByState(w.node.Count, sandbox.Running, sandbox.Pausing, sandbox.Paused, sandbox.Died, sandbox.Lost))
		w.drainer, err = drain.New(cfg)
		return err
	}
	// From what the last shutdown learned, as sandboxd and the supervisor start: the
	// estimate of a checkpoint and, adaptive, the level its first epoch checks against it.
	w.learned = learned.Server{Dir: w.cfg.StateDir, Concurrency: w.cfg.Concurrency, Ceiling: maxConcurrency,
		Prior: w.cfg.PauseLatency, Budget: budget, KubeletGrace: kubeletGrace, Logger: w.logger}.Start()
	err = build(w.learned.Config())
	if err != nil {
		// What was learned is a prior, never a reason not to start (one round of the
		// learned estimate no longer fits the grace): set aside, with a warning.
		if cold, ok := w.learned.Cold(err); ok {
			err = build(cold)
		}
	}
	if err != nil { // the flags' plan does not fit: name the flags, not drain's Config
		return usageError{fmt.Errorf("-grace %v is too short for one round of checkpoints of -pause-latency %v and the escalate and grpc steps' reserves: %w",
			w.cfg.Grace, w.cfg.PauseLatency, err)}
	}
	return nil
}

// pod is this pod in the Kubernetes API (-pod), or nil when there is none or no service
// account is mounted: the drain then goes on with -grace and posts no Events.
func (w *Worker) pod() *kube.Pod {
	if w.cfg.Pod == "" {
		return nil
	}
	cfg := w.cfg.Kube
	cfg.Logger = w.logger
	if w.cfg.PodUID != "" {
		cfg.UID = w.cfg.PodUID
	}
	pod, err := kube.New(w.cfg.Pod, cfg)
	if err != nil {
		w.logger.Warn("no Kubernetes API access: -grace stands, no Events", "error", err)
		return nil
	}
	podstart.Read(pod, w.logger) // before drain.New: a POD_NAME or POD_UID not naming the pod is said at start
	return pod
}

// usageError is newWorker's error when the flags, valid one by one, make no plan that
// fits: Main exits 2, as for bad usage.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// serve serves until SIGTERM or SIGINT (one that came while newWorker ran included: the
// budget counts from it), ctx ending or its serving stopping (below), then shuts down,
// writes the Report and the termination message (writeReport), and returns the Report and
// an error when serving stopped on its own or the Report could not be written. A SIGINT
// after that forces; a SIGTERM again does not (drain.Drainer.ServeSignals): it is a
// restarted kubelet's, which stops the container again, or a runtime's that sends the stop
// signal with every stop request, never a shortened grace (the kubelet does not run the
// stop again for a deletion with a shorter one); with -pod the pod's deletion is read
// again. SIGHUP and SIGQUIT never end the worker (hupquit): their default action would end
// it at once, with no drain, no Report and every sandbox lost.
//
// Serving that stops on its own (the listener's Accept failing for good) is logged at
// Error when it stops, and the worker drains at once, as at SIGTERM, as drain.Server.Run
// does: a worker no client can reach is of no use, and its sandboxes are checkpointed
// while it still holds them; serve's error then makes Main exit 1.
//
// The Report is written before the sandbox node is closed: Close waits for the timeout
// deletions in progress (`runsc delete -force`, about 2 s each; until just before SIGKILL
// at most: closeNode), and the drain ended only its margin before SIGKILL, which they
// would have pushed the Report past. Nor does serve
// wait for a Serve that a connection still in its handshake holds (close): the worker's
// exit ends that connection.
func (w *Worker) serve(ctx context.Context) (*drain.Report, error) {
	// The signals have been held since newWorker began (w.signals): a connection waiting
	// in the socket's queue is answered the moment serving starts, and a SIGTERM that came
	// after that answer, or while the worker started, found its default action, which
	// killed the worker at once (docs/faults.md rows 240 and 241).
	ctx, drainNow := context.WithCancelCause(ctx) // the Drainer's Shutdown, its budget anchored then; the cause is the Report's
	defer drainNow(nil)
	served := make(chan error, 1)
	go func() {
		serveHook(w)
		err := w.grpc.Serve(w.ln) // nil once Stop or GracefulStop was called
		if errors.Is(err, grpc.ErrServerStopped) {
			// Stop or GracefulStop came before Serve began: the drain's grpc step (a
			// SIGTERM while the worker started, nothing to checkpoint), or close.
			err = nil
		}
		if err != nil {
			w.logger.Error("serving gRPC stopped: draining now; the worker will exit 1",
				"address", w.ln.Addr().String(), "error", err)
			// Sent before the drain it begins, so that the drain's end finds it: the
			// termination message says why the exit status is 1.
			err = fmt.Errorf("serving gRPC stopped: %w", err)
			served <- err
			drainNow(err)
			return
		}
		served <- nil
	}()
	w.logger.Info("worker serving", "address", w.ln.Addr().String(), "runtime", w.rt.Name(),
		"checkpointed", w.node.Count(sandbox.Paused))
	w.progress.Start(w.drainer)
	rep := w.signals.Drain(ctx, w.drainer)
	w.progress.Stop() // the Report below is the last written
	var stopped error
	ended := false
	select {
	case stopped = <-served: // the grpc step stopped it, or it stopped on its own
		ended = true
	default: // a GracefulStop the step left to close's Stop
	}
	// The Report and the termination message first, the learned rates after: they
	// matter more, and a Save held up (its fsyncs behind the checkpoints' writeback)
	// spent the headroom left before SIGKILL (docs/faults.md row 365).
	err := w.writeReport(rep, stopped)
	w.learned.Save(rep, w.drainer.Budget(), w.steps) // for the next worker and drainkit plan
	grpcStopped, left := w.close(func() {
		if w.savedAfterDrain(rep) {
			err = w.writeReport(rep, stopped)
		}
	})
	if left != nil { // the pod's last state says why the exit status is 1, and when the worker exits
		w.writeTerminationMessageExiting(rep, errors.Join(stopped, left), err)
	}
	if grpcStopped && !ended {
		stopped = <-served
	}
	return rep, errors.Join(stopped, err, left)
}

// writeReport writes rep to STATE_DIR/last-shutdown.json and its summary, with stopped
// when serving stopped on its own, to the termination message path, so the pod's last
// state says what happened; a failure to write the summary is logged and does not change
// the exit. It returns the error of writing the Report; when it cannot be written, the
// Report an earlier shutdown left is removed, not left in its place, this drain's account
// as it stood stays, unfinished, and on a full file system this one written in the space
// that freed (lastreport.Progress.Finish; docs/faults.md rows 1118, 1119, 1611).
func (w *Worker) writeReport(rep *drain.Report, stopped error) error {
	data, err := json.MarshalIndent(rep, "", "  ")
	if err == nil { // an empty file is not a Report: a Report that does not encode is an error
		err = w.progress.Finish(data)
	}
	w.writeTerminationMessage(rep, stopped, err)
	return err
}

// writeTerminationMessage writes rep's summary to the termination message path, with
// why the exit status is 1 besides the drain (failed: serving stopped on its own,
// checkpoints left running) and where the Report is (reportErr when it could not be
// written); a failure to write it is logged.
func (w *Worker) writeTerminationMessage(rep *drain.Report, failed, reportErr error) {
	w.writeTerminationMessageWith(rep, nil, failed, reportErr)
}

// writeTerminationMessageExiting is writeTerminationMessage for a worker about to exit
// well after its drain ended (awaitAbandoned gave up): its first line says when the
// drain ended and when the worker exits, where the drain's "exited 1.496s before
// SIGKILL" read as the exit, more than a second early (docs/faults.md row 3360).
func (w *Worker) writeTerminationMessageExiting(rep *drain.Report, failed, reportErr error) {
	exiting := func(first string) string {
		return termmsg.ExitingLater(first, "gvisor-worker", rep, time.Until(w.drainer.Budget().Kill()))
	}
	w.writeTerminationMessageWith(rep, exiting, failed, reportErr)
}

func (w *Worker) writeTerminationMessageWith(rep *drain.Report, verdict func(string) string, failed, reportErr error) {
	extra := termmsg.ServerLines("gvisor-worker", failed, filepath.Join(w.cfg.StateDir, reportFile), reportErr)
	path, explicit := termmsg.Path(w.cfg.TerminationLog)
	if _, werr := termmsg.Write(path, explicit, termmsg.SummaryWith(rep, verdict, extra...)); werr != nil {
		w.logger.Warn("termination message not written", "error", werr)
	}
}

// close stops gRPC, waits for the checkpoints the drain abandoned (awaitAbandoned), then
// calls waited (when not nil: the Report is to be written again while the state directory
// is still this worker's), then stops the sandbox node's timeouts (closeNode), the learned
// rates, the state directory's lock and
// the signals (SIGTERM stays caught after that in Main's worker,
// until the process exits: config.exits), and reports whether grpc's Stop returned: when it did
// not (stopWait), Serve has not returned either and is not to be waited for. Its error
// names the abandoned checkpoints, and the timeouts' deletes, still running when it
// stopped waiting for them.
func (w *Worker) close(waited func()) (grpcStopped bool, left error) {
	defer w.signals.Stop()  // last: until the process exits, a SIGTERM must not end it half-way
	defer w.lock.Release()  // it lets a worker waiting for the directory in
	defer w.learned.Close() // a worker closed without its Save: the rates file's lock too
	grpcStopped = true
	if w.grpc != nil {
		grpcStopped = w.stopGRPC()
	}
	left = w.awaitAbandoned()
	if waited != nil {
		waited()
	}
	if w.node != nil {
		left = errors.Join(left, w.closeNode())
	}
	return grpcStopped, left
}

// closeNode closes the sandbox node, whose Close waits for the timeouts in progress,
// each a delete (`runsc delete -force`, 30 s at most), until abandonedExitLead before the
// budget's SIGKILL: a delete that hangs held the worker past SIGKILL, exit status 137
// with nothing saying what it waited for (row 3421). Its error names the sandboxes whose
// deletes still run then. A worker whose start failed has no budget, and no sandbox
// running whose timeout could be in progress: its node's Close is not bounded.
func (w *Worker) closeNode() error {
	if w.drainer == nil {
		w.node.Close()
		return nil
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		if !w.untilOrKill(ctx.Done()) {
			cancel(errBeforeKill)
		}
	}()
	start := time.Now()
	err := w.node.CloseWithin(ctx)
	if err != nil {
		err = fmt.Errorf("after %v: %w", time.Since(start).Round(time.Millisecond), err)
		w.logger.Error("deletes of sandboxes whose timeout passed did not end before SIGKILL: exiting without them", "error", err)
	}
	return err
}

// savedAfterDrain corrects rep's account of the sandboxes whose checkpoint the preserve
// phase abandoned at its hard deadline (timed_out: a started runsc checkpoint is never
// cut) and that checkpoint then saved: after the Report was written, while the worker
// waited for it (awaitAbandoned), or before a later Run of the phase listed the node, which
// found it paused, not running, and left the first Run's entry. The sandbox is recorded
// paused and the next worker restores it, where the Report counted it lost. Each such
// entry becomes preserved, counted once, its End and Duration those of the wait for it,
// its Error saying what it was, when the checkpoint saved it and why it changed; the preserve phase's result stays, its error
// naming them. It reports whether it changed rep: a drain where nothing was late has no
// such entry, and its Report is not written again.
func (w *Worker) savedAfterDrain(rep *drain.Report) bool {
	if rep == nil || rep.Preserve == nil {
		return false
	}
	var ids []string
	for i := range rep.Preserve.Entries {
		e := &rep.Preserve.Entries[i]
		at, saved := w.stops.savedAt(e.ID)
		if e.Outcome != pause.TimedOut || !saved || !at.After(e.Start) || !w.pausedHere(e.ID) {
			continue
		}
		rep.Preserve.Counts[pause.TimedOut]--
		if rep.Preserve.Counts[pause.TimedOut] == 0 {
			delete(rep.Preserve.Counts, pause.TimedOut)
		}
		rep.Preserve.Counts[pause.Preserved]++
		e.Outcome = pause.Preserved // End and Duration stay the preserve's as it was waited for
		e.Error = fmt.Sprintf("timed_out when the preserve phase ended (%s); its checkpoint, abandoned then, went on and saved it at %s: preserved, the entry changed at the worker's exit",
			e.Error, at.UTC().Format(time.RFC3339Nano))
		ids = append(ids, e.ID)
	}
	if len(ids) == 0 {
		return false
	}
	if p := rep.Phase(drain.PhasePreserve); p != nil {
		p.Error += fmt.Sprintf("; the checkpoints it abandoned went on and saved %v: preserved in the account at the worker's exit", ids)
	}
	w.logger.Info("sandboxes the Report said timed_out were saved by the checkpoints the drain abandoned, which went on: writing the Report again with them preserved", "ids", ids)
	return true
}

// errBeforeKill ends what the worker waits for at its exit, abandonedExitLead before the
// budget's SIGKILL.
var errBeforeKill = fmt.Errorf("%v before SIGKILL", abandonedExitLead)

// awaitAbandoned waits, holding the state directory, for the checkpoints the drain
// abandoned at the Preserver's hard deadline (they are never cut: held.Preserve) to end,
// each recorded when it saved its sandbox. Released at once, the directory went to a
// worker restarted on it (in the same PID namespace: a supervisor's restart, not a new
// pod's), whose sweep took the sandbox still checkpointing for one lost running and
// force-deleted it mid-save: the sandbox lost, where its checkpoint would have saved it
// for that worker to restore (row 3221).
//
// Those checkpoints have no bound of their own (a stuck gofer, a hung images volume), so
// the wait ends abandonedExitLead before the budget's SIGKILL, and its error names the
// checkpoints still running: waited for without bound, such a one held the worker for
// ever outside a pod (systemd, `go run`), and in a pod until SIGKILL, exit status 137
// with nothing saying what it waited for (row 3260).
func (w *Worker) awaitAbandoned() error {
	inFlight := w.stops.inFlight()
	if len(inFlight) == 0 {
		return nil
	}
	slices.Sort(inFlight)
	start := time.Now()
	w.logger.Warn("checkpoints the drain abandoned still run: holding the state directory until they end, so that what they save is recorded for the next worker, at most until just before SIGKILL",
		"ids", inFlight, "sigkill_in", time.Until(w.drainer.Budget().Kill()).Round(time.Millisecond))
	if !w.untilOrKill(w.stops.whenIdle()) {
		left := w.stops.inFlight()
		slices.Sort(left)
		// The next worker judges what they save even once they have ended (row 3540).
		w.node.MarkCheckpointsLeft(left)
		err := fmt.Errorf("checkpoints the drain abandoned still running %v before SIGKILL, after %v: %v; the worker exits without them, and a sandbox whose checkpoint has not ended is lost",
			abandonedExitLead, time.Since(start).Round(time.Millisecond), left)
		w.logger.Error("the checkpoints the drain abandoned did not end before SIGKILL: releasing the state directory without them", "ids", left, "error", err)
		return err
	}
	w.logger.Info("the checkpoints the drain abandoned have ended; releasing the state directory",
		"ids", inFlight, "waited", time.Since(start).Round(time.Millisecond))
	return nil
}

// abandonedExitLead is how long before the budget's SIGKILL awaitAbandoned gives up: the
// time the worker takes to say what it left (the log, the termination message) and exit
// with a status of its own, where SIGKILL's 137 said nothing.
const abandonedExitLead = 250 * time.Millisecond

// untilOrKill waits until done is closed, true, or until abandonedExitLead before the
// budget's SIGKILL, false, following the budget's moves.
func (w *Worker) untilOrKill(done <-chan struct{}) bool {
	budget := w.drainer.Budget()
	for {
		moved := budget.Changed() // before the read: Changed's rule
		giveUp := time.NewTimer(time.Until(budget.Kill().Add(-abandonedExitLead)))
		select {
		case <-done:
			giveUp.Stop()
			return true
		case <-giveUp.C:
			return false
		case <-moved:
			giveUp.Stop()
		}
	}
}

// stopWait is how long close waits for grpc's Stop. Closing connections takes
// microseconds; what takes longer is a connection still in its HTTP/2 handshake (a client
// that connected and sent nothing, a frozen peer), for which grpc's Stop, and Serve, wait
// until grpc's connection timeout, 120 s. The grpc step left that Stop running at its
// deadline (draingrpc.Stop, the step's detail says so); waited for here, it held the
// worker, its Report written, and the state directory's lock past the grace, to the
// kubelet's SIGKILL. The process's exit closes that connection.
const stopWait = 250 * time.Millisecond

// stopGRPC calls grpc's Stop and reports whether it returned within stopWait; when it did
// not, it is left running, with a warning.
func (w *Worker) stopGRPC() bool {
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		w.grpc.Stop()
	}()
	t := time.NewTimer(stopWait)
	defer t.Stop()
	select {
	case <-stopped:
		return true
	case <-t.C:
		w.logger.Warn("grpc's Stop had not returned: a connection still in its handshake holds it until grpc's connection timeout; not waited for, the exit closes it",
			"waited", stopWait)
		return false
	}
}

// escalate is the teardown step for sandboxes the preserve phase could not checkpoint:
// each gets SIGTERM (a gVisor actor saves its own state on it), a grace that ends
// KillWait before the step's deadline, then SIGKILL; all in parallel. Those no checkpoint
// held at the preserve phase's deadline got theirs then (escalateEarly, unless the phase
// ran again or was forced: preserver.Run); the step signals the rest and waits for all,
// and for each checkpoint or other transition still in flight (escalateListed), to signal
// its sandbox if it ends running. It reports an error naming every sandbox that needed
// SIGKILL, whose end could not be seen, or whose checkpoint or transition outlived the
// step, unsignalled.
func (w *Worker) escalate(ctx context.Context) error {
	// The escalations begun at the preserve phase's deadline run under the step's window
	// as the plan gave it then, which does not follow the budget: one that moved SIGKILL
	// earlier since ends the step first, which waited for them past its deadline, until the
	// drain abandoned it, its error naming no sandbox (row 783). They end with the step's
	// context.
	defer context.AfterFunc(ctx, w.stops.cutEarly)()
	w.escalateListed(escalation{ctx: ctx, step: true, late: pastDeadline(ctx)}, new(sync.WaitGroup))
	w.stops.wg.Wait() // each returns by its context's deadline, the step's
	return w.stops.err()
}

// escalateEarly begins, when the preserve phase's deadline passes, the escalation of every
// running sandbox that no checkpoint holds: the Preserver starts none after it, and a
// checkpoint of another sandbox still in flight then (it may run to the hard deadline)
// must not spend the escalate step's reserve, the time these sandboxes' actors have to
// save themselves before SIGKILL. A sandbox whose checkpoint is in flight then (the node
// shows it pausing) is escalated when that checkpoint ends, if it failed (row 760), and
// if the budget's SIGKILL is still kill, the one the Run that reached its deadline began
// with: moved later since, the preserve phase runs the Preserver again, to checkpoint that
// sandbox, which a signal would lose (row 781). Each runs under the escalate step's window
// as the plan gives it now, and ends with the escalate step at the latest (row 783).
func (w *Worker) escalateEarly(kill time.Time) {
	ctx, cancel := w.drainer.Plan().Context(w.stops.earlyParent(), "escalate")
	budget := w.drainer.Budget()
	e := escalation{ctx: ctx, stands: func() bool { return !budget.Kill().After(kill) }}
	var wg sync.WaitGroup
	w.escalateListed(e, &wg)
	w.stops.wg.Go(func() { wg.Wait(); cancel() })
}

// escalateListed escalates under e every sandbox of the node not checkpointed, adding one
// to wg for each, which the end of its escalation takes away: a running one at once; one
// a checkpoint of the Preserver's holds when that checkpoint ends, if it failed (row 760);
// one a request in flight holds in a transition (a client's checkpoint, which the gate
// admits during the drain, a create or a restore) when it ends, if it ends running, where
// it was passed over, and signalled late, by the escalate step after other checkpoints, or
// never, or signalled in the middle of the client's checkpoint (row 782).
func (w *Worker) escalateListed(e escalation, wg *sync.WaitGroup) {
	// In flight first: a checkpoint that fails before the node is listed below leaves its
	// sandbox running there; one that succeeds leaves it paused, and nothing to signal.
	inFlight := w.stops.inFlight()
	for _, id := range inFlight {
		wg.Add(1)
		then := w.afterCheckpoint(e, id, wg.Done)
		if !w.stops.await(id, then) {
			then(false) // it ended since: as above
		}
	}
	for _, info := range w.node.List() {
		switch {
		case info.State == sandbox.Running:
			wg.Add(1)
			w.stop(e, info.ID, wg.Done)
		case sandbox.InTransition(info.State) && !slices.Contains(inFlight, info.ID):
			wg.Add(1)
			w.afterTransition(e, info.ID, wg.Done)
		}
	}
}

// errTransitionOutlived is the escalate step's error for a sandbox a request in flight
// still held in a transition at the step's deadline: it was not signalled.
var errTransitionOutlived = errors.New("a request in flight (a client's checkpoint, a create or a restore) still held it at the escalate step's deadline: not signalled")

// afterTransition escalates sandbox id under e, in a goroutine, once the transition a
// request in flight holds it in has ended, if the sandbox is running then; then it calls
// each of done. If e.ctx ends first, it gives up, with errTransitionOutlived when it is the
// step's (escalation.step). An escalation
// that no longer holds (e.holds) leaves the sandbox to what comes next, as afterCheckpoint
// does.
func (w *Worker) afterTransition(e escalation, id string, done ...func()) {
	w.stops.wg.Go(func() {
		state, err := w.node.AwaitSettled(e.ctx, id)
		switch {
		case !e.holds():
		case err == nil && state == sandbox.Running:
			w.stop(e, id, done...)
			return
		case err != nil && e.step && !errors.Is(err, sandbox.ErrNotFound):
			w.stops.fail(id, fmt.Errorf("%w (%w)", errTransitionOutlived, err))
		}
		finish(done)
	})
}

// An escalation is what escalations begun together run under: ctx, whose deadline is the
// escalate step's, and stands, which reports whether the decision to escalate still holds
// when a checkpoint they waited for ends; nil, it always does.
//
// step is whether they are the escalate step's own, which name, in the step's error, a
// checkpoint or transition still in flight at their context's end, its sandbox not
// signalled. Those begun at the preserve phase's deadline give up on one in silence: their
// deadline is the step's as the plan gave it then, which can come before the Preserver's
// hard deadline, to which a checkpoint may run and end preserved, and before the step's
// own; the step, which begins once the Preserver has returned, waits for what is still in
// flight then and names what outlives it (row 800).
//
// late is whether the step began with no time left: the preserve phase, which waits for
// a checkpoint until the Preserver's hard deadline, after the step's own, ran past it.
type escalation struct {
	ctx    context.Context
	stands func() bool
	step   bool
	late   bool
}

// pastDeadline reports whether ctx's deadline has passed already.
func pastDeadline(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// holds reports whether e's decision to escalate still holds.
func (e escalation) holds() bool { return e.stands == nil || e.stands() }

// stop escalates sandbox id under e, in a goroutine, unless it is signalled already; then
// it calls each of done. While a checkpoint of the sandbox is in flight, the escalation
// waits for its end and happens only if it failed: a checkpoint begun before the preserve
// phase's deadline that fails after it leaves its sandbox running, to be signalled then,
// not at the escalate step (row 760).
func (w *Worker) stop(e escalation, id string, done ...func()) {
	switch w.stops.claim(id, func() func(bool) { return w.afterCheckpoint(e, id, done...) }) {
	case signalled:
		finish(done)
	case claimed:
		w.stops.wg.Go(func() {
			defer finish(done)
			w.escalate1(e.ctx, id)
		})
	}
}

// errCheckpointOutlived is the escalate step's error for a sandbox whose checkpoint was
// still in flight at the step's deadline: it was not signalled.
var errCheckpointOutlived = errors.New("its checkpoint was still in flight at the escalate step's deadline: not signalled")

// errCheckpointHeldPastStep is errCheckpointOutlived at a step that began with no time
// left (escalation.late): it says why, and that nothing is left to signal the sandbox if
// its checkpoint fails. It read as if the step had waited through its window, and said
// nothing of the sandbox's fate after the Report.
var errCheckpointHeldPastStep = fmt.Errorf("%w: the preserve phase held it past that deadline "+
	"(the Preserver waits for a checkpoint until its hard deadline, which comes after the step's), so the step began with no time left; "+
	"a sandbox is never signalled mid-checkpoint, and if this one fails, nothing signals the sandbox before SIGKILL", errCheckpointOutlived)

// afterCheckpoint is what an escalation of sandbox id under e does at the end of a
// checkpoint of it that it found in flight: escalate the sandbox if the checkpoint failed,
// else call each of done. If e.ctx ends first, it gives up, with errCheckpointOutlived
// when it is the step's (escalation.step), and calls done, so that the escalate step, which waits for it (stops.wg), ends by its
// deadline. An escalation that no longer holds (e.holds) does neither: it calls done and
// leaves the sandbox to what comes next, the preserve phase's next Run or the escalate
// step.
func (w *Worker) afterCheckpoint(e escalation, id string, done ...func()) func(failed bool) {
	w.stops.wg.Add(1)
	var once sync.Once
	settle := func(f func()) {
		once.Do(func() {
			defer w.stops.wg.Done()
			f()
		})
	}
	disarm := context.AfterFunc(e.ctx, func() {
		settle(func() {
			switch {
			case e.step && e.holds() && e.late:
				w.stops.fail(id, errCheckpointHeldPastStep)
			case e.step && e.holds():
				w.stops.fail(id, errCheckpointOutlived)
			}
			finish(done)
		})
	})
	return func(failed bool) {
		disarm()
		settle(func() {
			if failed && e.holds() {
				w.stop(e, id, done...)
			} else {
				finish(done)
			}
		})
	}
}

// finish calls each of done.
func finish(done []func()) {
	for _, f := range done {
		f()
	}
}

// errKillAtStepEnd is the escalate step's error for a sandbox whose SIGKILL was being sent
// when its escalation's context ended: the step does not wait for the send.
var errKillAtStepEnd = errors.New("SIGKILL being sent as the escalation's context ended (the send goes on, for up to a second): its end not seen")

// escalate1 signals sandbox id, waits and SIGKILLs it as escalate.Policy does, and keeps
// the error of an escalation that needed SIGKILL or could not see the sandbox's end. It
// returns when Stop does, or once ctx ended while a SIGKILL was being sent: Stop gives
// that send a second past ctx's end (a SIGKILL must not be cancelled by
// the end it enforces), and the escalate step, which waits for escalate1, would outlive
// its deadline by the send's time, and the drain abandon it, its error naming no sandbox.
// The sandbox is then named with errKillAtStepEnd, and Stop's outcome is logged when it
// returns.
func (w *Worker) escalate1(ctx context.Context, id string) {
	late := make(chan struct{})
	var once sync.Once
	target := lateKill(ctx, w.target(id), func() { once.Do(func() { close(late) }) })
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		exit, err := escalate.Policy{}.Stop(ctx, target)
		switch {
		case exit == escalate.ExitedAfterKill && err == nil:
			// Stop says nothing more of a sandbox that only did not exit on SIGTERM in
			// time: formatted as it was, the step's error read "exited_after_kill:
			// %!w(<nil>)" (row 972).
			err = escalate.ErrKilled
		case exit == escalate.ExitedAfterKill: // why it never got the SIGTERM
			err = fmt.Errorf("%w: %w", escalate.ErrKilled, err)
		}
		w.logger.Warn("not checkpointed: signalled", "id", id, "exit", exit, "error", err)
		// Gone (exited before the signal) is vanished, as in the preserve phase: no fault.
		if (exit != escalate.Exited && exit != escalate.Gone) || err != nil {
			w.stops.fail(id, fmt.Errorf("%s: %w", exit, err))
		}
	}()
	select {
	case <-stopped:
	case <-late:
		select {
		case <-stopped: // Stop's own words, when it has them already
		default:
			w.stops.fail(id, fmt.Errorf("%s: %w (%w)", escalate.ExitUnknown, errKillAtStepEnd, context.Cause(ctx)))
		}
	}
}

// lateKill is t, whose SIGKILL calls late once ctx has ended during the send, or had
// ended before it.
func lateKill(ctx context.Context, t escalate.Target, late func()) escalate.Target {
	return escalate.Funcs{
		SignalFunc: func(sctx context.Context, sig syscall.Signal) error {
			if sig == syscall.SIGKILL {
				defer context.AfterFunc(ctx, late)()
			}
			return t.Signal(sctx, sig)
		},
		WaitFunc:   t.Wait,
		ExitedFunc: t.Exited,
	}
}

// target is a sandbox as escalate.Policy signals and waits for it.
func (w *Worker) target(id string) escalate.Target {
	r, ok := w.rt.(*sandbox.Runsc)
	if !ok { // an in-process fake stops at once
		return escalate.Funcs{
			SignalFunc: func(context.Context, syscall.Signal) error { return nil },
			WaitFunc:   func(context.Context) error { return nil },
		}
	}
	return r.Runtime.Target(id) // runsc kill/wait, and runsc state when a wait was stolen
}

// Run implements the Run RPC. A timeout_s out of range is InvalidArgument, naming it.
func (w *Worker) Run(ctx context.Context, req *RunRequest) (*SandboxReply, error) {
	timeout := req.TimeoutS
	switch {
	case timeout < 0 || timeout > sandbox.MaxTimeoutS:
		return nil, status.Errorf(codes.InvalidArgument, "timeout_s must be in [0, %d] (0: a day), got %d",
			sandbox.MaxTimeoutS, timeout)
	case timeout == 0:
		timeout = 86400
	}
	info, err := w.node.Create(ctx, timeout)
	return reply(info, err)
}

// Checkpoint implements the Checkpoint RPC. Once the drain's preserve phase has reached
// its deadline, or the drain was forced, it is refused, FailedPrecondition
// (checkpointTooLate).
func (w *Worker) Checkpoint(ctx context.Context, req *IDRequest) (*SandboxReply, error) {
	if err := w.checkpointTooLate(); err != nil {
		return nil, err
	}
	info, err := w.node.Pause(ctx, req.ID)
	return reply(info, err)
}

// checkpointTooLate refuses a client's checkpoint once the drain's preserve phase has
// reached its deadline, or the drain was forced during it, as the Preserver starts none
// after that: the time left is the escalate step's (the SIGTERM that lets a sandbox's
// actor save itself, then SIGKILL) and the exit's. The gate admits a Checkpoint during
// the drain, and one started then held its sandbox from the escalation, which waited for
// it in vain and named the sandbox, and ran into the grpc step, which cut the call (a
// runsc checkpoint, never cut, runs on into the kubelet's SIGKILL). A budget that moved
// SIGKILL later since runs the phase again, unless the drain was forced: checkpoints
// start again.
func (w *Worker) checkpointTooLate() error {
	over := w.preserveOver.Load()
	if over == nil || !over.forced && w.drainer.Budget().Kill().After(over.kill) {
		return nil
	}
	why := "the drain's preserve phase ended at its deadline"
	if over.forced {
		why = "the drain was forced during its preserve phase"
	}
	return status.Error(codes.FailedPrecondition, "worker draining: "+why+", and no checkpoint starts after it: "+
		"the time left is the escalation's (SIGTERM, for the sandbox to save itself, then SIGKILL) and the exit's")
}

// Restore implements the Restore RPC. Its context keeps a restore from starting, never
// cuts one short (sandbox.Node.Resume: killing `runsc restore` once gVisor's sandbox
// process had started left that process running with no container in runsc's state).
//
// A restore that fails in the runtime (runsc cannot restore the image: damaged, made by
// another runsc, or runsc failing) leaves the sandbox paused, its checkpoint and record
// kept for a retry or a person; it is logged at ERROR with runsc's words, for the
// worker's log said nothing of it: a drain's Report counted the sandbox preserved, and
// only the client was told it never came back (row 1071).
func (w *Worker) Restore(ctx context.Context, req *IDRequest) (*SandboxReply, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	info, err := w.node.Resume(ctx, req.ID)
	if err != nil && !errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrConflict) &&
		!errors.Is(err, sandbox.ErrDied) { // removed, not kept: the node's WARN line says so
		w.logger.Error("restore failed: the sandbox stays paused, its checkpoint kept; a Restore may be retried",
			"id", req.ID, "error", err)
	}
	return reply(info, err)
}

// restoreRefused is the unary interceptor in front of the gate's. The gate refuses a
// Restore while the worker drains (codes.Unavailable, its handler not called: Restore
// itself answers no Unavailable) with its words for new work, "retry on another node";
// but the checkpoint of a sandbox this worker holds paused is in its state directory (a
// hostPath), which no other node has, and a client that did as told found no such
// sandbox there (NotFound), as if it were gone. That refusal says to restore it here once
// the worker serves again. Only the words change: the gate's details (its
// google.rpc.RetryInfo, the wait its grpc-retry-pushback-ms trailer asks too) are kept,
// for a client that reads them to know when to come back. Any other call, and a Restore
// of a sandbox not paused here, keep the gate's answer.
func (w *Worker) restoreRefused(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	reply, err := handler(ctx, req)
	r, ok := req.(*IDRequest)
	if !ok || info.FullMethod != MethodRestore || status.Code(err) != codes.Unavailable || !w.pausedHere(r.ID) {
		return reply, err
	}
	refusal := status.Convert(err).Proto()
	refusal.Message = fmt.Sprintf("worker draining: Restore of %s not started: its checkpoint is in this worker's state directory, "+
		"which no other node has: restore it here once the worker serves again", r.ID)
	return nil, status.FromProto(refusal).Err()
}

// pausedHere reports whether the node holds sandbox id paused.
func (w *Worker) pausedHere(id string) bool {
	for _, info := range w.node.List() {
		if info.ID == id {
			return info.State == sandbox.Paused
		}
	}
	return false
}

// List implements the List RPC.
func (w *Worker) List(context.Context, *ListRequest) (*ListReply, error) {
	out := &ListReply{Sandboxes: []SandboxReply{}}
	for _, info := range w.node.List() {
		out.Sandboxes = append(out.Sandboxes, SandboxReply{ID: info.ID, State: info.State})
	}
	return out, nil
}

func reply(info sandbox.Info, err error) (*SandboxReply, error) {
	switch {
	case err == nil, errors.Is(err, sandbox.ErrUnverified):
		// Paused and recorded, its image one this worker cannot read (the node's
		// ERROR line says so): a Restore may bring it back, and tells.
		return &SandboxReply{ID: info.ID, State: info.State}, nil
	case errors.Is(err, sandbox.ErrNotFound):
		return nil, status.Error(codes.NotFound, err.Error())
	case errors.Is(err, sandbox.ErrLost):
		// Its pause failed and stopped it: its state is gone, and no retry brings it back.
		return nil, status.Error(codes.DataLoss, err.Error())
	case errors.Is(err, sandbox.ErrConflict), errors.Is(err, sandbox.ErrDied):
		// A dead sandbox is not running, and no retry checkpoints it: Internal told a
		// client to retry what cannot succeed.
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	default:
		return nil, status.Error(codes.Internal, err.Error())
	}
}
