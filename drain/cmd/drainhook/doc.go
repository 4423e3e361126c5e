// Command drainhook is an exec preStop hook for manifests that cannot use
// httpGet. It calls the server's drain.Drainer.PreStop handler until the
// drain wait is over, bounded per request, by consecutive failures and by
// the drain deadline the server reports, and always exits 0 so that a
// failing hook never holds the pod:
//
//	lifecycle:
//	  preStop:
//	    exec:
//	      command: ["/drainhook", "-url", "http://127.0.0.1:8082/drain"]
//
// It runs in the server's container, with its environment: when
// DRAINKIT_HOOK_SECRET is set there (drain.EnvHookSecret), it sends it in
// the X-Drain-Secret header, as the server's HookGuard requires. A refusal
// (a 403 for a secret missing or wrong, a 404 for a wrong path) ends it at
// once: asking again would only spend the grace period.
package main
