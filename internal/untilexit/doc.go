// Package untilexit keeps a stop signal caught from the moment a server has drained
// until its process exits, for drain's HandleSignals and Server.Run and for the
// examples' Main (internal/startsig's KeepUntilExit).
//
// A server that has drained still has work to do before it exits: write its Report,
// its termination message, its learned rates. The kubelet or the container runtime
// may send SIGTERM again meanwhile (a restarted kubelet runs the termination over; a
// runtime sends the stop signal with every stop request), and once the server's own
// handler has stopped, that SIGTERM has its default action: the process ends with
// status 143, the Report cut short, and a pod whose drain went well says Error
// (docs/faults.md rows 1111, 1112, 1116, 1117).
//
//	sigs := make(chan os.Signal, 4)
//	signal.Notify(sigs, syscall.SIGTERM) // the server's own, before it serves
//	// ... the drain ...
//	untilexit.Keep(syscall.SIGTERM, os.Interrupt) // before sigs stops
//	signal.Stop(sigs)
//	// ... the Report, the termination message; a SIGTERM now is dropped
//
// Keep leaves no goroutine running: the signals go to one channel nobody reads, which
// os/signal sends to without blocking, dropping what does not fit. SIGINT is never
// kept: a person's Ctrl-C after the drain ends the process, as they asked.
// signal.Reset gives a kept signal its default action back.
package untilexit
