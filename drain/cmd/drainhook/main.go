// Command drainhook is an exec preStop hook for manifests that cannot use
// httpGet. It calls the server's drain.Drainer.PreStop handler until the
// drain wait is over, bounded per request, by consecutive failures and by
// the drain deadline the server reports, and always exits 0 so that a
// failing hook never holds the pod:
//
//	lifecycle:
//	  preStop:
//	    exec:
//	      command: ["/drainhook", "-url", "http://127.0.0.1:8080/drain"]
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/drainkit/drainkit/drain"
)

func main() {
	var h drain.ExecHook
	flag.StringVar(&h.URL, "url", "http://127.0.0.1:8080/drain", "URL of the server's preStop handler")
	flag.DurationVar(&h.RequestTimeout, "timeout", drain.DefaultHookRequestTimeout, "timeout of each request")
	flag.IntVar(&h.MaxFailures, "failures", drain.DefaultHookMaxFailures, "consecutive failed requests before giving up")
	flag.DurationVar(&h.MaxWait, "max-wait", 0, "bound on the whole hook (0: the drain deadline the server reports)")
	flag.Parse()
	h.Start = drain.ProcessStart() // T0: the kubelet started this hook
	h.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	if _, err := h.Run(context.Background()); err != nil {
		h.Logger.Warn("drainhook: giving up; the kubelet proceeds to SIGTERM", "err", err)
	}
	// Always exit 0: a failing hook must only hand over to SIGTERM.
}
