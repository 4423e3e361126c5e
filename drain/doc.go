// Package drain takes a Kubernetes sandbox node through its termination:
// it stops admitting new work, waits in the preStop hook only as long as
// the budget allows, preserves every running sandbox in parallel, tears
// down devices and servers in order, and reports on every phase. Without
// it, a preStop wait with no deadline eats the grace period and SIGKILL
// lands in the middle of a one-at-a-time shutdown, losing sandboxes and
// killing the block-device daemon with live devices.
//
// Typical wiring, at server start:
//
//	budget, err := deadline.New(grace, deadline.Config{}) // the pod's terminationGracePeriodSeconds; the margin scales with it
//	if err != nil {
//		log.Fatal(err)
//	}
//	teardown, err := ublk.New(daemon, ublk.Config{}) // a Step whose phase is critical
//	if err != nil {
//		log.Fatal(err)
//	}
//	// As NewServer's gate: what takes work off the node, a follow of a sandbox
//	// still running here, and a keep-alive that keeps it running until preserved.
//	gate := &drain.Gate{Exempt: []drain.Class{drain.Pause, drain.Checkpoint, drain.Delete, drain.Stream, drain.KeepAlive}}
//	d, err := drain.New(drain.Config{
//		Budget:    budget,
//		Gate:      gate,
//		Sandboxes: pause.ListFunc(listRunning),
//		Steps:     []drain.Step{teardown, drain.HTTPServerStep("http", srv, 5*time.Second)},
//	})
//	if err != nil {
//		log.Fatal(err) // names the bad field, e.g. Config.Steps[1].Phase().Name
//	}
//	mux.Handle("POST /sandboxes", gate.Admit(drain.Create, create))
//	mux.Handle("GET /readyz", gate.Readiness(nil))
//	// The hook on a listener of its own (loopback or the pod's address),
//	// guarded: only a request with the secret (httpHeaders) may drain.
//	hooks := http.NewServeMux()
//	guard := &drain.HookGuard{Secret: secret, Logger: logger}
//	hooks.Handle("GET /drain", guard.Wrap(d.PreStop())) // lifecycle.preStop.httpGet.path
//	// The signals before anything is served: from its first answer (a
//	// readiness probe) the server may be deleted, and a SIGTERM that came
//	// before the handler would end it at once, with no drain.
//	sigs := make(chan os.Signal, 4)
//	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
//	go http.Serve(hookLn, hooks)
//	go srv.Serve(ln)
//	rep := d.ServeSignals(ctx, sigs) // SIGTERM starts Shutdown; SIGINT then forces, SIGTERM again does not
//
// Every phase — the preStop wait ("drain"), the gate wait, the preserve
// phase and each step — runs under the window the Drainer's deadline.Plan
// gives it by name when it starts; nothing else in the package computes a
// deadline. Guarantees, with T0 the preStop call (or SIGTERM without one)
// and the budget's deadline SIGKILL minus its margin:
//   - the preStop wait ends by the drain phase's deadline: the budget's
//     deadline minus the live reserves of the preserve phase (running
//     sandboxes x estimated preserve / concurrency) and of every step;
//   - Shutdown's gate wait ends by the gate's deadline and InFlightWait; no
//     preserve starts after the preserve phase's deadline, and preserves in
//     flight end by its hard deadline: where the first critical step's
//     window begins (the ublk teardown), or else the budget's deadline;
//   - each step ends by its own deadline (the budget's deadline minus the
//     reserves of the steps after it) or is abandoned at it, and runs even
//     when preservation or an earlier step failed;
//   - when the time left is too short for the reserves, critical steps get
//     theirs first and the other phases share the rest in proportion;
//   - a step that preserves sandboxes itself (a final sweep, its Detail a
//     *pause.Report) is merged into Report.Preserve as it ends, so the
//     Report's log line, DrainFinished and Report.Err count what it lost;
//   - nothing in the package calls os.Exit; the Report says what happened
//     and how long before SIGKILL it ended.
//
// # gRPC served through ServeHTTP
//
// A grpc.Server served on the same http.Server (its ServeHTTP, over h2c or
// TLS) shuts down with it, in the HTTP step. Give it draingrpc's
// interceptors with the Drainer's gate: its work RPCs are then gated and
// counted, and the step waits for them to its deadline, and its health
// Watches answer NOT_SERVING once the gate closes and end, as a Stream
// does, when the preserve phase ends. A stream the gate does not count and
// that never ends by itself (a tool's reflection stream, an ungated call)
// the step closes, with every connection still in a request, its reserve
// after the last operation the gate counts ended, and says so in the
// Report (the step fails: a request was cut). Add no draingrpc.Step
// for that server: grpc's GracefulStop does not wait for RPCs served
// through ServeHTTP, it cancels them all at once. Nor does grpc's keepalive
// MaxConnectionAge apply there (the connection is net/http's): a client
// refused codes.Unavailable keeps its connection to this node, and every
// retry comes back here, until the HTTP step closes it. Behind a Service,
// serve gRPC on a listener of its own (grpc.Server.Serve) with
// MaxConnectionAge and a draingrpc.Step (see package draingrpc).
//
// # Telemetry
//
// Through Config.TracerProvider and Config.MeterProvider (the global ones
// by default), under the scope github.com/drainkit/drainkit/drain. One trace
// per termination: the span drain.shutdown starts at T0 (the first preStop
// call, or Shutdown without one) and ends with the Report, with status
// Error when Report.Err is not nil (a sandbox lost, a step failed, SIGKILL
// first); under it one span per phase, drain.<phase>: drain.drain (the
// preStop wait), drain.gate, drain.preserve, then one per step. Attributes
// are drainkit.drain.phase, .result, .reason (the wait's), .forced, and on
// the root .lost and .headroom (seconds). Metrics, each with its unit:
//   - drainkit.drain.phase.duration (s): histogram by phase and result,
//     with boundaries from 5 ms to 2 h;
//   - drainkit.drain.headroom (s): gauge, the time left before the expected
//     SIGKILL when the shutdown finished;
//   - drainkit.drain.sandboxes.running ({sandbox}): gauge, recorded at every
//     count of the preStop wait and the gate phase;
//   - drainkit.drain.gate.rejections ({operation}): counter by
//     drainkit.drain.class of the operations the Gate turned away (the
//     classes the Report's account keeps, the first 32, then "other");
//   - drainkit.drain.outcomes ({sandbox}): counter by drainkit.drain.outcome
//     of the drain's final account, the Report's, each sandbox once
//     ("unaccounted" for what the preserve phase left no account of),
//     where pause's drainkit.pause.sandboxes counts per Run of the
//     Preserver, so again for a sandbox a later Run of the same drain
//     preserved (a restarted kubelet, creates in flight, a step's sweep).
package drain
