// Command gvisor-worker is the agent-substrate ateom shape done right: a gRPC worker on a
// Unix socket that runs gVisor sandboxes through runsc (Run), checkpoints them (Checkpoint)
// and restores them (Restore), and gets them through the pod's termination with drainkit.
//
//	gvisor-worker -state-dir /var/lib/worker -grace 1h -concurrency 8
//
// On SIGTERM: Run and Restore answer codes.Unavailable (a Restore of a sandbox checkpointed
// here says to restore it here once the worker serves again: its checkpoint is in this
// state directory) while Checkpoint stays allowed (an actor may still suspend itself) until
// the preserve phase's deadline (or a force), then answers codes.FailedPrecondition; every live sandbox is checkpointed in parallel inside
// the budget the grace period leaves (not a fixed minute: -grace, cut to the pod's
// deletionTimestamp when -pod, default $POD_NAME, gives API access), as many at once as the node
// takes (-concurrency 0, the default: the adaptive limit, from the level the last
// shutdown learned, kept in STATE_DIR/learned-rates.json with the estimate of a
// checkpoint; -concurrency N fixes it); a sandbox that could not be
// checkpointed gets SIGTERM, a bounded grace and SIGKILL (escalate.Policy), where a failed
// `runsc wait` is never mistaken for an exit; gRPC GracefulStop is bounded and followed by
// Stop, and a connection stalled in its handshake is closed before that bound
// (grpc.ConnectionTimeout, half the step's reserve). The Report goes to STATE_DIR/last-shutdown.json, and its summary to the
// termination message, as soon as the drain ends: before the worker waits for the
// deletions of sandboxes whose timeout passed (`runsc delete`, about 2 s), which could
// otherwise push them past SIGKILL. The exit status is 0 when every sandbox was
// checkpointed and every step ended in time. A restarted worker loads the checkpoints and
// Restore resumes each sandbox where it was. A worker started while another still holds
// the state directory (STATE_DIR/state.lock: it is still checkpointing into it) waits for
// that one's exit before it touches the directory or its socket, logging for whom it
// waits; its own SIGTERM while it waits ends it, exit status 1, with nothing touched. SIGHUP is logged and ignored
// and SIGQUIT dumps the goroutines to the log: neither ends the worker.
//
// As a pod's command the worker is PID 1 of the pod's PID namespace, where gVisor's
// processes that `runsc run -detach` and `runsc checkpoint` leave behind are re-parented to
// it: it has an init built in (internal/pid1), which runs the worker as its child, forwards
// every signal to it, reaps those orphans and exits with the worker's status. Without it
// each checkpoint left five zombies and a Restore in the same pod failed. Anywhere else (a
// supervisor's child, a pod with an init) the worker runs as it is.
//
// The service is defined by hand (api.go) with a JSON codec: no protoc.
package main
