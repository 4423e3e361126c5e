// Package server is sandboxd, an AgentENV-style sandbox server wired with drainkit, as a
// package so that drainsim can run the same server (cmd: examples/sandboxd).
//
// A sandbox server that waits in its preStop hook for every sandbox to end and then pauses
// them one at a time loses most of them to the kubelet's SIGKILL; sandboxd instead closes
// its gate and flips readiness at the preStop call, waits only while the budget allows,
// pauses its sandboxes in parallel, stops its device daemon and exits inside the grace
// period, leaving paused-sandbox records that the next process loads.
//
// Wiring: New in server.go builds the budget from -grace, the ublk teardown step over the
// device daemon's socket, and the Drainer with the Gate, the Preserver at -concurrency (0,
// the default: the adaptive limit, from what the last shutdown learned) and the steps; routes.go puts each route behind its Gate class (create and resume gated,
// pause and delete exempt), /readyz and the preStop /drain; Run serves and hands the
// signals to the Drainer. The code is the example: it is compiled and tested, where a copy
// here would drift.
//
// Signals: SIGTERM and SIGINT start the shutdown; a SIGINT after the first signal forces it,
// a SIGTERM again does not (the kubelet may send it again itself). SIGHUP is logged
// and ignored (sandboxd has nothing to reload, and a node server must never die of a
// closed terminal); SIGQUIT dumps every goroutine's stack into the log and sandboxd goes
// on. Neither kills it: dying at once would lose every sandbox and, through its
// Pdeathsig, kill the device daemon with live devices.
//
// State directory: one sandboxd at a time. New takes its lock (internal statedir,
// STATE_DIR/state.lock) before it touches anything in it; a sandboxd started while another
// holds it (the last one still draining into it: a restart, an update with maxSurge) waits,
// not listening, logging for whom, and takes over once that one has exited, SIGKILLed or
// not. Its own SIGTERM or SIGINT while it waits makes New fail, naming the holder, with
// nothing in the directory touched (Main exits 1).
//
// Guarantees: those of drain.Drainer with the budget of -grace; the preStop wait ends by the
// drain deadline, every pause starts before the preserve deadline and ends by the budget's
// deadline, the ublk step and the HTTP shutdown each end by theirs (the ublk step's stages
// laid out from the reserve of the grace in use: one begun with -grace's, as with no
// sandbox it begins at SIGTERM, takes a shorter deletion's read after, its holder wait
// going on until only that reserve is left or the daemon is asked to stop: see
// internal/ublkstep); the Report is written to
// STATE_DIR/last-shutdown.json before Run returns, and every sandbox not preserved is
// logged, one line each, whether or not that file could be written. sandboxd never kills
// its device daemon, nor exits (which kills it: Pdeathsig), while the ublk step left it
// serving a device, or could not tell, on a kernel where that kill may crash the host: it
// waits for the daemon's exit, said at ERROR, and the pod's SIGKILL ends the wait
// (Server.Close).
package server
