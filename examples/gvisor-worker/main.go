package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/drainkit/drainkit/internal/pid1"
	"github.com/drainkit/drainkit/internal/termmsg"
)

func main() {
	pid1.Init() // as PID 1 of the pod's PID namespace: reap runsc's orphans, forward signals
	os.Exit(Main(context.Background(), os.Args[1:], os.Stderr))
}

// Main runs the worker and returns its exit status: 0 after a clean shutdown, 1 when the
// shutdown lost sandboxes, the worker could not start, its serving stopped on its own (it
// then drained at once: serve) or the Report could not be written, 2 for bad usage (a
// -grace too short for the plan included).
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "gvisor-worker:", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	w, err := newWorker(cfg, logger)
	if err != nil {
		fmt.Fprintln(stderr, "gvisor-worker:", err)
		path, explicit := termmsg.Path(cfg.TerminationLog)
		if _, werr := termmsg.Write(path, explicit, termmsg.StartFailed("gvisor-worker", err)); werr != nil {
			logger.Warn("termination message not written", "error", werr)
		}
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	rep, err := w.serve(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "gvisor-worker:", err)
		return 1
	}
	if rep.Err() != nil {
		return 1
	}
	return 0
}
