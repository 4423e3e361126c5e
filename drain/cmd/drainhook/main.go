package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"

	"github.com/drainkit/drainkit/drain"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run runs the hook with the command line args, logging to logw. It
// returns the exit status: always 0, since a failing hook must only hand
// over to SIGTERM, never hold the pod (a bad flag is 2, before any wait).
func run(args []string, logw io.Writer) int {
	h := drain.ExecHook{Start: drain.ProcessStart()} // T0: the kubelet started this hook
	fs := flag.NewFlagSet("drainhook", flag.ContinueOnError)
	fs.SetOutput(logw)
	fs.StringVar(&h.URL, "url", "http://127.0.0.1:8080/drain", "URL of the server's preStop handler")
	fs.DurationVar(&h.RequestTimeout, "timeout", 0, "timeout of each request (0: ExecHook's default, 10s)")
	fs.IntVar(&h.MaxFailures, "failures", 0, "consecutive failed requests before giving up (0: ExecHook's default, 5)")
	fs.DurationVar(&h.RetryInterval, "retry", 0, "pause after a failed request (0: ExecHook's default, 1s)")
	fs.DurationVar(&h.MaxWait, "max-wait", 0, "bound on the whole hook (0: the drain deadline the server reports)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	h.Logger = slog.New(slog.NewTextHandler(logw, nil))
	if _, err := h.Run(context.Background()); err != nil {
		h.Logger.Warn("drainhook: giving up; the kubelet proceeds to SIGTERM", "err", err)
	}
	return 0
}
