// Package hupquit keeps node servers (drain.Server.Run, examples/gvisor-worker,
// examples/sandboxd) alive through SIGHUP and SIGQUIT. Their default action ends a Go
// program at once: no drain, no Report, every sandbox lost (and sandboxd's device daemon
// killed through its Pdeathsig). A node server must never die of them.
//
//	sigs := make(chan os.Signal, 4)
//	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
//	stop := hupquit.Handle(logger, "sandboxd") // both before serving
//	go srv.Serve(ln)
//	rep := drainer.ServeSignals(ctx, sigs)
//	stop()
//
// Until stop is called:
//   - SIGHUP (a closed terminal, or a reload request: the servers have nothing to reload)
//     is logged and ignored;
//   - SIGQUIT dumps every goroutine's stack to the log, as a Go program's SIGQUIT would,
//     and the server goes on serving.
//
// Both log lines, at level WARN, name the server and say that SIGTERM stops it. stop
// returns once the handling goroutine has ended; after it the two signals have their
// default action again.
package hupquit
