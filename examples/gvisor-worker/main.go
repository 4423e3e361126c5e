package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/internal/pid1"
	"github.com/drainkit/drainkit/internal/termmsg"
)

func main() {
	pid1.Init() // as PID 1 of the pod's PID namespace: reap runsc's orphans, forward signals
	os.Exit(Main(context.Background(), os.Args[1:], os.Stderr))
}

// Main runs the worker and returns its exit status: 0 after a clean shutdown, 1 when the
// shutdown lost sandboxes or the worker could not start, 2 for bad usage (a -grace too
// short for the plan included).
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
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	rep := w.serve(ctx)
	data, _ := json.MarshalIndent(rep, "", "  ")
	reportPath := filepath.Join(cfg.StateDir, "last-shutdown.json")
	err = store.WriteFile(reportPath, data, 0o600)
	// The summary goes to the termination message path, so the pod's last state says
	// what happened; a failure to write it must not change the exit.
	where := "full report: " + reportPath
	if err != nil {
		where = "the full report could not be written: " + err.Error()
	}
	path, explicit := termmsg.Path(cfg.TerminationLog)
	if _, werr := termmsg.Write(path, explicit, termmsg.Summary(rep, where)); werr != nil {
		logger.Warn("termination message not written", "error", werr)
	}
	if err != nil {
		fmt.Fprintln(stderr, "gvisor-worker:", err)
		return 1
	}
	if rep.Err() != nil {
		return 1
	}
	return 0
}
