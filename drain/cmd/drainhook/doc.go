// Command drainhook is an exec preStop hook for manifests that cannot use
// httpGet. It calls the server's drain.Drainer.PreStop handler until the
// drain wait is over, bounded per request, by consecutive failures and by
// the drain deadline the server reports. It exits 0 once the server
// answered, and 1 when no request reached the drain (nothing answered, or
// a refusal): the kubelet goes on to SIGTERM either way, but records a
// FailedPreStopHook event only for one that failed. The event says only
// "PreStopHook failed" (the kubelet keeps a hook's output out of events so
// that no secret leaks); why is in the kubelet's log, whose "Exec lifecycle
// hook for Container in Pod failed" line at -v=1 carries the hook's output:
//
//	lifecycle:
//	  preStop:
//	    exec:
//	      command: ["/drainhook", "-url", "http://127.0.0.1:8082/drain"]
//
// A hook that ended without its drain wait (a bad flag or argument
// included: a manifest's slip starts no drain either) also writes its last
// line, the reason, to the container's log: to -container-log, by default
// /proc/1/fd/2, the stderr of the container's PID 1 (the server), which
// the container runtime keeps and `kubectl logs` and a node's log shipper
// show. The write never waits (a pipe no one reads loses the line, not the
// hook's time). In a pod with shareProcessNamespace, PID 1 is the pod's
// pause process: give -container-log "" there, or the server's
// /proc/PID/fd/2.
//
// It runs in the server's container, with its environment: when
// DRAINKIT_HOOK_SECRET is set there (drain.EnvHookSecret), it sends it in
// the X-Drain-Secret header, as the server's HookGuard requires, and with
// no -url it calls the hook where DRAINKIT_HOOK_LISTEN
// (drain.EnvHookListen) says drain.Server serves it, 127.0.0.1:8082 when
// unset. A hook on the pod's address ([$(POD_IP)]:8082) is found only so:
// the kubelet does not expand $(POD_IP) in a lifecycle hook's command. A
// refusal
// (a 403 for a secret missing or wrong, a 404 for a wrong path) ends it at
// once: asking again would only spend the grace period.
package main
