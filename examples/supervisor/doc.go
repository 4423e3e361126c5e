// Command supervisor is a drain-aware PID 1 for a sandbox node container.
// Sandbox servers not written in Go (AgentENV is Rust) cannot import
// drainkit; the supervisor runs beside such a server, unmodified, and gets
// it through termination with drainkit by driving the HTTP API it already
// has.
//
//	supervisor [flags] -- SERVER_COMMAND [ARGS...]
//
//	-listen ADDR        where to serve GET /readyz and GET /healthz
//	                    (default :8081)
//	-hook-listen ADDR   where to serve GET /drain, the preStop hook
//	                    (default 127.0.0.1:8082; the manifest uses the
//	                    pod's address). A request must carry the header
//	                    X-Drain-Secret equal to SUPERVISOR_HOOK_SECRET
//	                    (required off loopback); any other is refused 403
//	                    and logged: one drain takes the node out of service.
//	-api SHAPE          the server's API: generic (default) or agentenv
//	-server-url URL     the server's API base (default http://127.0.0.1:8080;
//	                    with -api agentenv http://127.0.0.1:8000)
//	-api-key-file FILE  the API key, sent as X-API-Key (default: the
//	                    environment variable DRAINKIT_API_KEY, which the
//	                    children do not inherit; never argv). A key the
//	                    server refuses (401, 403 to /readyz's listing) is
//	                    logged at Warn once, naming where it came from; one
//	                    no header can carry (a control character inside it;
//	                    surrounding white space is trimmed) stops it at start
//	-grace DURATION     the pod's terminationGracePeriodSeconds (default 30s)
//	-concurrency N      pause requests sent at once: N > 0 fixes it; 0, the
//	                    default, is pause's adaptive limit (1 to 32), from
//	                    the level the last drain learned (-state-dir)
//	-state-dir DIR      where what a drain learned is kept for the next one
//	                    (learned-rates.json, written at exit; a hostPath that
//	                    exists; a supervisor started while another still
//	                    drains there leaves the file to it until it exits);
//	                    empty, the default: nothing is kept
//	-daemon "CMD ARGS"  optional device daemon, started as a child, stopped
//	                    last (split on spaces, no quoting)
//	-daemon-socket PATH or: the server's own ublk daemon, found by the peer
//	                    credentials of its socket among the server's
//	                    descendants, stopped last over that socket
//	-report FILE        where to write the JSON Report at exit; held
//	                    (flock on FILE.lock) from the start to the exit
//	-termination-log FILE  the drain's summary at exit (default:
//	                    $DRAINKIT_TERMINATION_LOG, else /dev/termination-log
//	                    if it exists)
//	-pod NAME           this pod in the Kubernetes API (default $POD_NAME,
//	                    the downward API's): its deletionTimestamp tightens
//	                    the budget (kubectl delete --grace-period, an
//	                    eviction) and the drain posts its Events on it
//	                    (drain.Config.Pod; the overlay's rbac.yaml); no
//	                    service account, or none set: -grace stands
//	-pod-uid UID        this pod's metadata.uid (default $POD_UID, the
//	                    downward API's): a new pod of its name (after
//	                    kubectl delete --force) is not taken for this one
//	-kubelet-grace D    the grace the kubelet gives this pod when it stops it
//	                    on its own (graceful node shutdown's slice, with no
//	                    deletionTimestamp): with -pod, a drain whose pod has
//	                    no deletionTimestamp ends by T0 + D
//	                    (drain.Config.KubeletGrace); 0, the default: not known
//	-kubelet-config F   instead of -kubelet-grace: the node's
//	                    KubeletConfiguration (the kubelet's --config,
//	                    mounted from the host), from which D is computed
//	                    for this pod's priority as the kubelet does
//	-ublk-kernel DECL   kernels the operator declares fixed=PATTERN,
//	                    vulnerable=PATTERN or exit-may-hang=PATTERN, or
//	                    @FILE of such lines (repeatable, first match wins)
//
// The generic shape (GET /sandboxes lists [{"id","state"}], POST
// /sandboxes/{id}/pause pauses one) is changed with -list-path,
// -fallback-list-path, -pause-path, -items-field, -id-field, -state-field,
// -size-field, -size-unit and -next-token HEADER,PARAM; with -api agentenv
// (GET /v2/sandboxes pages, the running ones, sandboxID, memoryMB, see
// httpsource.AgentENV) the ones given override single settings.
// SUPERVISOR_SYSFS_ROOT, for tests, points the daemon step at a fake sysfs
// tree (and turns off its /dev/ublk-control fallback);
// SUPERVISOR_SERVICE_ACCOUNT_DIR, for tests, is read instead of the pod's
// service account (token, ca.crt, namespace).
//
// What it does:
//   - catches its signals first thing, as PID 1 from the initialisation of
//     internal/pid1/early on, as sandboxd and gvisor-worker do: a SIGTERM
//     while it starts (its read of the pod, its listeners) is logged, and
//     the termination begins once its children have started, SIGKILL
//     counted from the SIGTERM (before, it ended the supervisor: exit 2 as
//     PID 1, no drain, no Report); a signal to forward then is logged and
//     not forwarded, the server not started;
//   - starts the daemon (if any) and the server as children; reaps every
//     child and orphan (wait4 on SIGCHLD; it makes itself a subreaper when it
//     is not PID 1) while keeping its own children's exit statuses, and at
//     exit kills and reaps every descendant still running (as PID 1 the
//     kernel does); forwards SIGUSR1, SIGUSR2 and SIGWINCH to the server;
//     never forwards SIGHUP (logged and ignored: a server with the default
//     disposition would die of it) or SIGQUIT (it dumps the supervisor's
//     goroutines to stderr and the supervisor goes on);
//   - on GET /drain (the kubelet's preStop httpGet): fixes T0, turns
//     /readyz 503, and waits while the server lists running sandboxes (with
//     -api agentenv every sandbox not paused, so also one being
//     snapshotted or forked, which runs again after and needs its pause:
//     the plan's preserve reserve counts it too), until the drain deadline
//     (drain.Drainer.PreStop);
//   - on SIGTERM: pauses every running sandbox through the API in parallel
//     within the preserve phase (pause.Preserver over httpsource, letting
//     in-flight pauses finish; a sandbox a user resumed after its pause is
//     listed again and paused again: the server admits resumes until its
//     own shutdown), lists once more and pauses whatever runs again since,
//     and tries again the ones the preserve phase could not pause, which its
//     log line and error name apart (the final sweep, within half the
//     server step's time; with -api
//     agentenv every sandbox not paused, so also one being snapshotted or
//     forked, which AgentENV lists as paused and which runs again after:
//     its pause is retried until it runs, and it is lost, with the state
//     in its entry's error, if it never does in that time; a pause it gave
//     up on at three quarters of the step, which AgentENV goes on with, is
//     listed until seven eighths, and preserved if listed paused then, its
//     entry's error saying "finished late", that listing made again at the
//     time a Retry-After names; and one it preserved that AgentENV lists
//     running once its pauses are over, before that wait, a pause answered
//     success that did not pause it or a resume since, is failed, lost;
//     one the preserve phase counted lost that AgentENV lists paused by
//     then, a pause that got no answer and that the server finished, is
//     preserved),
//     closes its API client's idle
//     connections (nothing is asked of the server after its SIGTERM, and a
//     graceful shutdown that waits for open connections would wait for
//     ours), sends the server its SIGTERM with the time left, waits for it (SIGKILL at the
//     step's deadline so the daemon still gets its turn), stops the daemon with drainkit's ublk teardown (it waits
//     until no process holds a device; on a kernel not known fixed, holders
//     still there when only its reserve is left are SIGKILLed if they are in
//     the supervisor's own cgroup, doomed anyway, and reported and spared
//     otherwise (ublk's last resort); it asks the daemon to stop with SIGTERM,
//     waits for its devices to go and for its exit, and kills it only when
//     the kernel rule allows), writes the Report (the final sweep's
//     outcomes, the server step's Detail, merged by drain into the
//     preserve phase's before it logs the Report) and exits with the
//     server's status (1 when the server exited 0 but sandboxes were lost,
//     the final sweep's included, which the Report's note names, or no
//     listing of the sandboxes ever succeeded: they are unknown, and the
//     Report says so with the last error, or none was complete: every one
//     failed after its first page, the note saying the listing was
//     INCOMPLETE, or the final sweep could not list, or not completely: a
//     sandbox resumed since that it did not reach is not known preserved,
//     which the note says, or the daemon step failed: a
//     device left, the daemon killed or crashed, which the note names, or
//     the Report could not be written, which the termination message says
//     instead of naming the file; the Report an earlier shutdown left there is
//     then removed, not taken for this one's, and on a full file system this
//     one written in the space it freed). SIGTERM and SIGINT go to the drain's
//     ServeSignals, so the Report says which began the termination and
//     which came during it (drain.Report.Cause, Signals). A SIGINT during the termination forces (a SIGTERM again does not: the pod's deletion is read again): the preStop wait ends, no
//     new pause is sent, and each step gets only its reserve; pauses already
//     sent are still awaited until the server step's deadline at most (the
//     server runs them anyway); the final sweep still lists, and what it
//     would have paused is in the Report, not started: lost (with -api
//     agentenv, only the ones known not paused: one shown paused that an
//     incomplete listing of the paused ones did not reach is not known to
//     run, and the note says the listing was INCOMPLETE).
//
// Guarantees: with T0 the preStop call (or SIGTERM without one) and G the
// grace, everything ends by T0 + G minus the margin (G/10, between 1.5 s
// and 5 s): the preStop wait by the drain deadline, no pause starts after
// the preserve deadline, the server step by the deadline minus the daemon's
// reserve (G/10, 0.5 s to 30 s each). If the server exits on its own before
// termination, the daemon is stopped (a SIGINT meanwhile forces: the
// teardown gets the daemon step's reserve from it, as in a drain; a
// SIGTERM with the preStop hook still open, the kubelet's grace run out,
// ends it by 2 s after, less the margin, as in a drain; with -pod, a
// SIGTERM no preStop call came before has the pod's deletion read, and the
// teardown ends before its SIGKILL (a force deletion's 2 s after it), or
// with none -kubelet-grace's; begun with -grace's reserve, its stages take
// the shorter grace's once only that is left, the holder wait going on
// until then) and the
// supervisor exits with the server's status, 1 at least when the daemon
// step failed (a device left live, the daemon left running, killed or
// crashed: the note names it, as in a drain; the teardown's verdict,
// devices and note are the Report's ublk, and a line of the termination
// message and of the report's log line). Whether it exits on its own
// before termination or during the drain (after the preStop hook fixed T0,
// or after SIGTERM but before the supervisor's own SIGTERM to it), the
// sandboxes its last listing that succeeded showed not paused and that
// the drain's account (if any) has no entry for are lost with it: the Report's lost_with_server, its note,
// the log at ERROR, the termination message's first line, and exit status
// 1 at least (its own shutdown may have paused some; nothing can list them
// any more). The one exit the supervisor does not take by itself: while a
// daemon that dies with it (its -daemon child, by its Pdeathsig; as PID 1,
// the server's own -daemon-socket daemon too, with the namespace) still
// serves a device the daemon step left live on a kernel not known fixed
// (or may serve one: the step could not read sysfs to tell, and so did
// not kill it), it writes the Report and then waits for the daemon's exit (logged at
// ERROR), since its own exit would SIGKILL the daemon with the device
// live; the pod's SIGKILL ends that wait. A supervisor that could not start
// writes the termination message "drainkit: no drain ran" and why, and
// exits 2 for bad usage, what the command line says (a flag it refuses:
// unknown, mistyped, out of range; no "--"; a -hook-listen off loopback
// with no SUPERVISOR_HOOK_SECRET, or on -listen's port; a directory named
// where a file is read or written, a file named as -state-dir; a -report
// another running supervisor holds, named; a -grace the
// plan does not fit in; a file that reads but holds what is refused), 1 for
// what the machine refused (a child's command not found, a listener held,
// an -api-key-file, -kubelet-config or -ublk-kernel @FILE it cannot read, a
// -report, -state-dir or -termination-log directory it cannot write in).
// A -daemon child that exits on its own before its teardown (crashed,
// killed, forked into the background) is said at ERROR, turns /readyz 503,
// and is in the Report's note and an exit status of 1 at least; the server
// runs on until the termination.
package main
