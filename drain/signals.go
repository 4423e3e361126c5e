package drain

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/internal/hupquit"
	"github.com/drainkit/drainkit/internal/signame"
	"github.com/drainkit/drainkit/internal/untilexit"
)

// HandleSignals wires the process's signals to the Drainer and returns the
// Report. It waits for the first of sigs (SIGTERM and SIGINT when none are
// given), ctx ending, or a Shutdown started elsewhere; then it runs
// Shutdown. A further signal while the shutdown runs switches to force mode
// (Force), except SIGTERM: the operator's second Ctrl-C is never swallowed,
// but a SIGTERM again may be the kubelet's own, which asks for no force
// (see ServeSignals). It stops relaying signals before it returns.
//
// SIGTERM (every signal of sigs but SIGINT) stays caught once it returns,
// until the process exits: a SIGTERM again then is dropped. The kubelet or
// the container runtime sends it again on its own (a restarted kubelet
// runs the termination over; a runtime that sends the stop signal with
// every stop request, see ServeSignals), and with its default action back
// it ended the process with status 143 while the caller wrote its Report:
// the Report cut short and a pod whose last state says Error for a drain
// that went well (docs/faults.md row 1111). No goroutine keeps it: a
// channel nobody reads (internal/untilexit), which os/signal drops what
// does not fit into; signal.Reset(syscall.SIGTERM) gives it its default
// action back. SIGINT
// has its default action again: a person's Ctrl-C ends the process, as
// they asked.
//
// While it runs, SIGHUP and SIGQUIT are handled as Server.Run handles them,
// unless sigs names either: SIGHUP is logged and ignored, SIGQUIT logs every
// goroutine's stack and the drain goes on. Their default action ends a Go
// program at once: a person's terminal that closed, or the SIGQUIT an
// operator sends for the stacks of a drain that looks stuck, ended it
// mid-drain, with no Report and every sandbox not yet preserved lost. After
// HandleSignals returns they have their default action again.
//
// HandleSignals never exits the process; the caller chooses the exit code:
//
//	rep := d.HandleSignals(ctx)
//	if rep.Err() != nil {
//		os.Exit(1)
//	}
//
// It registers for sigs when it is called. A server that answers anything
// before that (a readiness probe, a first request) may be deleted from then
// on, and a SIGTERM that arrives before the registration ends a Go program
// at once, with no drain and no Report (docs/faults.md rows 238 and 240).
// So a server registers before it serves and hands the channel to
// ServeSignals; HandleSignals suits a process that serves nothing before it
// is called.
//
// On a Drainer not made by New, HandleSignals and ServeSignals wait for
// no signal: they return at once a Report whose Err says so (see Drainer),
// so that the mistake ends the process at its start, not at SIGTERM.
func (d *Drainer) HandleSignals(ctx context.Context, sigs ...os.Signal) *Report {
	if !d.made() {
		return notMadeReport()
	}
	if len(sigs) == 0 {
		sigs = []os.Signal{syscall.SIGTERM, os.Interrupt}
	}
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, sigs...)
	defer signal.Stop(ch) // after keepCaught: between the two SIGTERM would end the process
	defer keepCaught(sigs...)
	// Their default action ends the process at once, mid-drain: no Report, every
	// sandbox not yet preserved lost (row 1041). Those in sigs are the caller's.
	if !slices.Contains(sigs, os.Signal(syscall.SIGHUP)) && !slices.Contains(sigs, os.Signal(syscall.SIGQUIT)) {
		stop := hupquit.Handle(d.log, "the process")
		defer stop()
	}
	return d.ServeSignals(ctx, ch)
}

// ServeSignals is HandleSignals over a channel of signals the caller
// relays (for example from its own signal.Notify, or a test): the first
// value received starts Shutdown, every later one calls Force except
// SIGTERM. A ch the caller closes gives no signal more: closed before the
// first, it starts nothing (ctx, or a Shutdown started elsewhere, does);
// closed during the shutdown, it forces nothing. A first signal other than SIGTERM (a person's SIGINT) while a
// preStop request is still open is not taken for the kubelet giving up on
// the hook (which Shutdown infers from SIGTERM then, and expects SIGKILL 2 s
// later): the kubelet never sends SIGINT. It is how a server waits for its signals when it registered
// them before it began to serve, as every server should:
//
//	sigs := make(chan os.Signal, 4)
//	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt) // before serving; never stopped
//	go srv.Serve(ln)
//	rep := d.ServeSignals(ctx, sigs)
//
// Leave ch registered until the process exits (do not signal.Stop it): a
// SIGTERM again once ServeSignals returned (the kubelet's own, below) then
// fills its buffer and is dropped, where with no channel registered it
// has its default action and ends the process with status 143 while it
// writes its Report (HandleSignals keeps it caught for its caller: row
// 1111).
//
// Only the signals ch is given are ServeSignals': SIGHUP and SIGQUIT, which
// a server should not die of (their default action ends a Go program at
// once, with no drain: a closed terminal, the SIGQUIT an operator sends for
// a stack dump), are the caller's to handle or to ignore
// (signal.Ignore(syscall.SIGHUP, syscall.SIGQUIT)), before serving; one
// given on ch is a signal like any other (it starts the shutdown, or
// forces it). HandleSignals and Server.Run handle them.
//
// A SIGTERM after the first never forces. The kubelet can send it again
// itself: a restarted kubelet runs the termination again, and a container
// runtime that sends the stop signal with every stop request (containerd
// before containerd#5021, or one restarted since the first stop: it
// remembers the signal in memory) delivers SIGTERM again. Forcing then
// would stop the preserves that still fit. Instead the SIGTERM is logged
// at Info and, with Config.Pod, the pod's deletion is read again (a later,
// shorter deletion is logged and left alone: the kubelet keeps the grace
// its termination started with; unless no preStop call came, see
// Config.Pod). SIGINT (a person's second Ctrl-C) and Force still force.
//
// ctx ending before any signal starts the shutdown, as a first signal does
// (a server's own reason to drain: its serving stopped), unless a signal
// is already waiting on ch, or, for a ctx that signal.NotifyContext ended
// on a signal, comes within 100 ms (os/signal may end the ctx before it
// sends ch the same signal): that signal is then the first. Like SIGINT, a ctx's end is not taken for
// the kubelet giving up on a preStop request still open: no SIGTERM came.
// It never forces the shutdown: Shutdown runs with ctx's values but not
// its cancellation, so the ctx that started it cannot cut it short, and
// cancelling ctx once it runs changes nothing. To end a running shutdown
// early, call Force.
func (d *Drainer) ServeSignals(ctx context.Context, ch <-chan os.Signal) *Report {
	if !d.made() {
		return notMadeReport()
	}
	switch sig, cause := firstSignal(ctx, ch, d.term.Done()); {
	case sig != nil:
		// The kubelet sends SIGTERM, never SIGINT: a person's Ctrl-C during
		// the preStop wait is not the kubelet giving up on the hook.
		d.interrupted.Store(sig != syscall.SIGTERM)
		d.received(sig, true)
	case cause != nil:
		// The server's own reason to drain (its serving stopped): no
		// SIGTERM came, so a preStop request still open is not the
		// kubelet giving up on it, as for SIGINT. The shutdown ends the
		// wait, the hook answers, and the kubelet's SIGTERM follows with
		// the grace the hook left.
		d.interrupted.Store(true)
		d.began(cause.Error())
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case sig, ok := <-ch:
				if !ok { // closed: no signal more
					ch = nil
					continue
				}
				d.received(sig, false)
				if sig == syscall.SIGTERM {
					d.log.Info("drain: SIGTERM during the shutdown: not forcing: a restarted kubelet stops the container again, "+
						"and a runtime may send the stop signal with every stop request; the pod's deletion is read again when Config.Pod is set; "+
						"SIGINT forces", "pod", d.pod != nil)
					d.readPod("SIGTERM during the shutdown")
					continue
				}
				d.Force()
			case <-stop:
				return
			}
		}
	})
	rep := d.Shutdown(context.WithoutCancel(ctx))
	close(stop)
	wg.Wait()
	return rep
}

// keepCaught keeps every signal of sigs but SIGINT caught until the
// process exits (internal/untilexit), for a caller that has drained and
// now writes its Report: the kubelet's SIGTERM again must not end it with
// status 143 (see HandleSignals). Register it before the caller's own
// channel stops, or the signal has its default action in between.
func keepCaught(sigs ...os.Signal) { untilexit.Keep(sigs...) }

// firstSignal waits for what begins ServeSignals' shutdown: the first
// signal on ch; else ctx's end (its cause), unless a signal is already
// waiting with it (a ctx that signal.NotifyContext ends on that signal:
// select took either, and the signal is the first), or comes within
// signalLag when ctx's cause is a signal's (signalCause); else term, a
// Shutdown started elsewhere (both nil). A closed ch has no signal to give
// (a relay that is done): its zero value is no signal, and reading it
// again would spin, so it is read no more (a nil channel).
func firstSignal(ctx context.Context, ch <-chan os.Signal, term <-chan struct{}) (os.Signal, error) {
	for {
		select {
		case sig, ok := <-ch:
			if ok {
				return sig, nil
			}
			ch = nil
		case <-ctx.Done():
			cause := context.Cause(ctx)
			if sig := signalWith(ch, signalCause(cause)); sig != nil {
				return sig, nil
			}
			return nil, cause
		case <-term:
			return nil, nil
		}
	}
}

// signalWith returns the signal that came with ctx's end: one already
// waiting on ch (select took either), or, when ctx's cause is a signal's
// (lag), one that comes within signalLag. os/signal sends a signal to its
// channels one after the other, in no set order: NotifyContext's goroutine
// may end ctx before the same signal reaches ch. Taken for the server's own
// reason to drain, a SIGTERM that came while a preStop request was open was
// not the kubelet giving up on the hook, and the budget kept a SIGKILL the
// kubelet's 2 s came long before. Nil when none came, or ch is closed.
func signalWith(ch <-chan os.Signal, lag bool) os.Signal {
	if !lag {
		select {
		case sig := <-ch: // never ready if nil
			return sig
		default:
			return nil
		}
	}
	t := time.NewTimer(signalLag)
	defer t.Stop()
	select {
	case sig := <-ch:
		return sig
	case <-t.C:
		return nil
	}
}

// signalLag is how long firstSignal waits for the signal that ended ctx
// (signal.NotifyContext's) to reach ch: os/signal sends it to ch in the
// same loop, so it is there at once unless that goroutine was preempted;
// a ch that never gets it (not notified of that signal) costs the
// shutdown this much of its start.
const signalLag = 100 * time.Millisecond

// signalCause reports whether cause is the one signal.NotifyContext gives
// the context it ends on a signal: "terminated signal received", which is
// context.Canceled too (os/signal's type is unexported: its text is what
// tells it).
func signalCause(cause error) bool {
	return cause != nil && cause != context.Canceled && errors.Is(cause, context.Canceled) &&
		strings.HasSuffix(cause.Error(), " signal received")
}

// maxSignals is how many received signals a Report keeps: a process
// signalled in a loop must not grow it without bound.
const maxSignals = 16

// received notes sig, received by ServeSignals, for the Report; first
// says it began the shutdown.
func (d *Drainer) received(sig os.Signal, first bool) {
	name := signame.Name(sig)
	d.mu.Lock()
	defer d.mu.Unlock()
	if first && !d.started {
		d.cause = name
	}
	if len(d.signals) < maxSignals {
		d.signals = append(d.signals, ReceivedSignal{Name: name, At: time.Now()})
	}
}

// began notes what began the shutdown when no signal did, unless
// Shutdown had already begun.
func (d *Drainer) began(cause string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.started {
		d.cause = cause
	}
}
