// Package startsig catches a node server's termination signals from the first thing it
// does, not from when it begins to serve.
//
// A node server takes a while to start: it waits for its state directory's lock (the
// server before it still draining into it), starts its device daemon, restores its
// sandboxes (with runsc, a `runsc` call each). The kubelet may send SIGTERM at any
// point of that (a pod deleted while it starts: a rollout scaled back, a node drained),
// and until a Go program handles SIGTERM its default action ends the program at once:
// no drain, no Report, and the device daemon killed with it through its Pdeathsig,
// devices and all. So a server calls Catch first, before its start, and drains with
// Catcher.Drain once it serves:
//
//	signals := startsig.Catch(logger, "sandboxd") // first thing
//	defer signals.Stop()
//	lockCtx, unlock := signals.Context(ctx)     // the lock's wait ends at SIGTERM
//	lock, err := statedir.Acquire(lockCtx, dir, statedir.Config{})
//	unlock()
//	// ... the device daemon, the sandboxes, the Drainer ...
//	go srv.Serve(ln)
//	rep := signals.Drain(ctx, drainer)
//
// A SIGTERM that came while the server started is logged when it comes, and Drain
// starts the drain at once, from the signal's arrival: the kubelet's SIGKILL is counted
// from it, not from the moment the server got to Drain. SIGHUP and SIGQUIT are handled
// from Catch on as internal/hupquit does (logged; the server goes on).
//
// Stop ends the catching: call it last, once the Report is written; a SIGTERM before
// then (a restarted kubelet sends it again) must not end the process half-way through.
// A server's Main, whose process exits once it returns, calls KeepUntilExit after Catch
// as well: SIGTERM then stays caught past Stop, until the exit.
package startsig
