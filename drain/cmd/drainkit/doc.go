// Command drainkit answers the three questions of a sandbox fleet's
// operator: will my grace period be enough before I roll the DaemonSet
// (plan), what is the node doing right now (the progress lines the
// library logs during a drain), and what happened on the node that lost
// sandboxes (report).
//
// One binary, one command per question, each with its own flags; every
// command's -h explains what it reads, what it prints and its exit status:
//
//	drainkit plan (-server URL | -sizes FILE | -count N) [-state-dir DIR] [-grace SECONDS]
//	drainkit report [-svg OUT] FILE
//	drainkit sim [-nodes M] [-sandboxes N|LO-HI] [-grace SECONDS] [-max-unavailable U]
//
// plan counts the sandboxes (the live server's API, read with
// pause/httpsource exactly as the supervisor reads it; or a JSON list of
// sizes), takes what the server learned at its last shutdown
// (STATE_DIR/learned-rates.json: the estimate of one pause, the
// concurrency, the grace period and the teardown steps' reserves), lays
// out the plan the server's drain.Drainer would make with deadline.Plan,
// and prints the predicted preserve time, the spare time (or shortfall), whether every
// sandbox would be preserved and the smallest terminationGracePeriodSeconds
// that fits. It exits 1 when the sandboxes do not fit, to gate a rollout.
//
// report renders a drain Report (sandboxd's STATE_DIR/last-shutdown.json,
// or the supervisor's -report file) as a text summary, and with -svg as a
// timeline: the phases, one bar per sandbox from the start of its pause to
// its end coloured by outcome, and the deadlines and the expected SIGKILL
// as lines. Its exit status is 1 when the drain did not go as planned
// (drain.Report.Err: sandboxes lost, a teardown step that failed, an end
// after SIGKILL, or a pod's name that is not the pod's), so a script can act
// on it.
//
// sim plans past one machine: a DaemonSet rolling update over a fleet, in
// virtual time, with the seed server, drainkit, and drainkit without a
// preStop wait side by side (rollout duration, sandboxes lost, nodes
// SIGKILLed, device daemons killed with live devices). It is a
// discrete-event model, not the servers: each node's termination is laid
// out with deadline.Budget (the kubelet's arithmetic) and the Drainer's
// deadline.Plan over its phases and reserves, and the pauses are scheduled over
// the concurrency slots inside the preserve window. The real library under
// testing/synctest is examples/drainsim's TestFullScaleInVirtualTime.
package main
