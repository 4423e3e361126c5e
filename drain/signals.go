package drain

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// HandleSignals wires the process's signals to the Drainer and returns the
// Report. It waits for the first of sigs (SIGTERM and SIGINT when none are
// given), ctx ending, or a Shutdown started elsewhere; then it runs
// Shutdown. A further signal while the shutdown runs switches to force mode
// (Force): the operator's second Ctrl-C, or a second SIGTERM, is never
// swallowed. It stops relaying signals before it returns.
//
// HandleSignals never exits the process; the caller chooses the exit code:
//
//	rep := d.HandleSignals(ctx)
//	if rep.Err() != nil {
//		os.Exit(1)
//	}
func (d *Drainer) HandleSignals(ctx context.Context, sigs ...os.Signal) *Report {
	if len(sigs) == 0 {
		sigs = []os.Signal{syscall.SIGTERM, os.Interrupt}
	}
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, sigs...)
	defer signal.Stop(ch)
	return d.ServeSignals(ctx, ch)
}

// ServeSignals is HandleSignals over a channel of signals the caller
// relays (for example from its own signal.Notify, or a test): the first
// value received starts Shutdown, every later one calls Force.
func (d *Drainer) ServeSignals(ctx context.Context, ch <-chan os.Signal) *Report {
	select {
	case <-ch:
	case <-ctx.Done():
	case <-d.term.Done():
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ch:
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
