package startsig

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/internal/hupquit"
	"github.com/drainkit/drainkit/internal/pid1/ready"
	"github.com/drainkit/drainkit/internal/signame"
	"github.com/drainkit/drainkit/internal/untilexit"
)

// A Catcher holds the SIGTERM and SIGINT a process receives from Catch until Stop, and
// when the first arrived. Make one with Catch.
type Catcher struct {
	log   *slog.Logger
	name  string
	in    chan os.Signal // from os/signal
	out   chan os.Signal // to the Drainer, every signal in order
	first chan struct{}  // closed once sig and at are set
	sig   os.Signal
	at    time.Time

	draining  atomic.Bool  // Drain was called: the signals are the Drainer's to log
	waits     atomic.Int32 // Contexts not yet released: a wait the signal ends
	stopOther func()
	stop      chan struct{}
	wg        sync.WaitGroup
	once      sync.Once
}

// Catch starts catching SIGTERM and SIGINT, and handling SIGHUP and SIGQUIT, at once.
// Under the built-in init (internal/pid1) it then lets the init forward the signals it
// held while the program started (internal/pid1/ready). name is the server as its log lines call
// it; logger nil logs nothing.
func Catch(logger *slog.Logger, name string) *Catcher {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Catcher{log: logger, name: name, in: make(chan os.Signal, 4), out: make(chan os.Signal, 4),
		first: make(chan struct{}), stop: make(chan struct{})}
	signal.Notify(c.in, syscall.SIGTERM, syscall.SIGINT)
	c.stopOther = hupquit.Handle(logger, name)
	c.wg.Go(c.relay)
	ready.Ready() // the built-in init held the signals until now: they are handled
	return c
}

// relay passes every signal on to out, in order, and notes the first.
func (c *Catcher) relay() {
	for {
		select {
		case sig := <-c.in:
			if c.sig == nil {
				c.sig, c.at = sig, time.Now()
				close(c.first)
			}
			switch {
			case c.draining.Load(): // the Drainer's to log
			case c.waits.Load() > 0:
				c.log.Warn(signame.Name(sig)+" while "+c.name+" waits to start: the wait ends", "signal", signame.Name(sig))
			default:
				c.log.Warn(signame.Name(sig)+" while "+c.name+" starts: it drains as soon as it has started, "+
					"the kubelet's SIGKILL counted from now", "signal", signame.Name(sig))
			}
			select {
			case c.out <- sig:
			case <-c.stop:
				return
			}
		case <-c.stop:
			return
		}
	}
}

// Arrived is closed once the first SIGTERM or SIGINT has arrived.
func (c *Catcher) Arrived() <-chan struct{} { return c.first }

// Context returns a context that parent's end or the first signal ends, whichever comes
// first; after a signal its cause says which ("SIGTERM received"). It suits a wait the
// signal should end (a state directory's lock), not work under way (the device daemon's
// start): a server that has begun to hold things drains them instead, with Drain. The
// returned function releases it.
func (c *Catcher) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	c.waits.Add(1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-c.first:
			cancel(errors.New(signame.Name(c.sig) + " received"))
		case <-done:
		}
	})
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			c.waits.Add(-1)
			close(done)
			wg.Wait()
			cancel(context.Canceled)
		})
	}
}

// Drain waits for the first signal (one caught before Drain was called included), ctx's
// end or a shutdown started elsewhere, and drains with d as drain.Drainer.ServeSignals
// does; it returns the Report. A signal that arrived before Drain was called starts d's
// budget at its arrival: the kubelet counts its grace from when it sent it. Call Drain
// once the server serves.
func (c *Catcher) Drain(ctx context.Context, d *drain.Drainer) *drain.Report {
	c.draining.Store(true)
	select {
	case <-c.first:
		d.Budget().OnSIGTERM(c.at) // the arrival, not now: SIGKILL comes by the kubelet's count
		c.log.Info("draining after the "+signame.Name(c.sig)+" that came while "+c.name+" started",
			"arrived", c.at, "started_after", time.Since(c.at).Round(time.Millisecond))
	default:
	}
	return d.ServeSignals(ctx, c.out)
}

// Stop ends the catching: SIGTERM and SIGINT, SIGHUP and SIGQUIT have their default
// actions again. It returns once the Catcher's goroutines have ended; a second call, or
// one on a nil Catcher (a server whose start failed before Catch), does nothing.
func (c *Catcher) Stop() {
	if c == nil {
		return
	}
	c.once.Do(func() {
		signal.Stop(c.in)
		c.stopOther()
		close(c.stop)
		c.wg.Wait()
	})
}

// KeepUntilExit keeps SIGTERM caught from now until the process exits, for a server's
// Main whose process exits once it returns (sandboxd, the supervisor, the gVisor worker).
// Their Catcher (or the supervisor's own) stops last, once the Report, the termination
// message and the learned rates are written, but before the process exits, and a SIGTERM
// between the two (the kubelet's again: a restarted kubelet, a runtime that sends the
// stop signal with every stop request) had its default action: status 143 where the
// drain went well, or, after a start that failed, no termination message
// (docs/faults.md rows 1112, 1116, 1117). Call it once the server catches SIGTERM itself
// (after Catch), not before: a SIGTERM then must still end a process that no drain would
// follow, not be dropped. Not for a caller that goes on after its server (a test that
// serves in its own process): SIGTERM would be dropped there too. SIGINT keeps its
// default action once the Catcher stops: a person's Ctrl-C ends the process, as asked.
// The channel is internal/untilexit's, which drain's HandleSignals and Server.Run keep
// SIGTERM caught on too.
func KeepUntilExit() { untilexit.Keep(syscall.SIGTERM) }
