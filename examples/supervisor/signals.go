//go:build linux

package main

import (
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/internal/pid1/early"
	"github.com/drainkit/drainkit/internal/signame"
)

// handled are the signals the supervisor handles: SIGTERM and SIGINT, the
// termination's, and the forwarded and kept ones.
func handled() []os.Signal {
	return slices.Concat([]os.Signal{syscall.SIGTERM, syscall.SIGINT}, forwarded, kept)
}

// caught holds the supervisor's signals from the first thing Main does,
// and as PID 1 of its PID namespace (the container's command) from the
// initialisation of package internal/pid1/early, among the first of the
// program's packages: the Go runtime handles every signal from its own
// start, and a SIGTERM before a signal.Notify has its default action there,
// which for a namespace's init is exit status 2, nothing said, no drain, no
// Report, no termination message. The supervisor's start before it reads
// its signals is the building of its drain (the pod's read at start, up to
// 2 s with an API server slow to answer, the learned state, the plan), its
// listeners and its children: Notify came only after all of that, and a
// SIGTERM then, a pod deleted while it starts, ended it (docs/faults.md row
// 1051). Now a SIGTERM or SIGINT that comes while it starts is logged when
// it comes, and the termination begins once the children have started
// (supervise), its budget counted from the signal's arrival.
//
// Only the signals the supervisor handles (handled) are caught from Main's
// start: as PID 1, early's channel, which caught every one, is kept for
// them and every other is given back to the Go runtime's default
// (signal.Reset), as it had it; one of those that came before is logged and
// dropped. A SIGTERM in PID 1's first milliseconds, before its Go runtime
// handles signals, is still discarded by the kernel (a namespace's init
// gets no signal it does not handle), as for sandboxd and gvisor-worker.
type caught struct {
	C   chan os.Signal // every handled signal, in the order it came: supervise's
	in  chan os.Signal // os/signal's: early's as PID 1, else one of our own
	log *slog.Logger

	begun atomic.Bool // supervise reads C: a signal from now on is no longer one of the start
	mu    sync.Mutex
	first os.Signal // the first SIGTERM or SIGINT of the start; nil: none
	at    time.Time // when it came

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// catchSignals starts catching the supervisor's signals; log says the ones
// that come while it starts. Close ends it.
func catchSignals(log *slog.Logger) *caught {
	c := &caught{C: make(chan os.Signal, 64), log: log, stop: make(chan struct{})}
	if ch := early.Signals(); ch != nil {
		c.in = ch
		signal.Reset(unhandled()...)
	} else {
		c.in = make(chan os.Signal, 8)
		signal.Notify(c.in, handled()...)
	}
	c.wg.Go(c.relay)
	return c
}

// unhandled are the signals early caught that the supervisor does not
// handle: every one but SIGURG and SIGCHLD, which early leaves to the Go
// runtime and the reaper.
func unhandled() []os.Signal {
	var out []os.Signal
	for n := syscall.Signal(1); n <= 64; n++ {
		if n != syscall.SIGURG && n != syscall.SIGCHLD && !slices.Contains(handled(), os.Signal(n)) {
			out = append(out, n)
		}
	}
	return out
}

// relay passes every handled signal on to C, and notes the first SIGTERM
// or SIGINT of the start; one to forward to the server that came while the
// supervisor started it drops.
func (c *caught) relay() {
	for {
		select {
		case sig := <-c.in:
			if !slices.Contains(handled(), sig) {
				c.log.Warn("supervisor: a signal it does not handle came while it started: dropped", "signal", signame.Name(sig))
				continue
			}
			switch start := !c.begun.Load(); {
			case start && slices.Contains(forwarded, sig):
				// Forwarded once the server runs, the operator's request to a
				// server that did not exist when it came would reach one that
				// has just started, which its default action ends.
				c.log.Warn("supervisor: "+signame.Name(sig)+" while the supervisor starts: not forwarded, the server has not started", "signal", signame.Name(sig))
				continue
			case start && (sig == syscall.SIGTERM || sig == syscall.SIGINT):
				c.startSignal(sig)
			}
			select {
			case c.C <- sig:
			case <-c.stop:
				return
			}
		case <-c.stop:
			return
		}
	}
}

// startSignal notes sig, a SIGTERM or SIGINT that came while the supervisor
// started, and says it.
func (c *caught) startSignal(sig os.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first != nil {
		return
	}
	c.first, c.at = sig, time.Now()
	c.log.Warn("supervisor: "+signame.Name(sig)+" while the supervisor starts: the termination begins once its children have started, "+
		"the kubelet's SIGKILL counted from now", "signal", signame.Name(sig))
}

// begin marks the start over (supervise reads C from now) and returns
// the first SIGTERM or SIGINT of the start and when it came; nil if none
// came.
func (c *caught) begin() (os.Signal, time.Time) {
	c.begun.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.first, c.at
}

// Close stops catching the signals, which have their default action again
// (but SIGTERM in Main's process: startsig.KeepUntilExit keeps it caught
// until the exit), and returns once the relay has ended. Call it last: a
// SIGTERM before then (a restarted kubelet sends it again) must not end the
// supervisor half-way through its Report.
func (c *caught) Close() {
	c.once.Do(func() {
		signal.Stop(c.in)
		close(c.stop)
		c.wg.Wait()
	})
}
