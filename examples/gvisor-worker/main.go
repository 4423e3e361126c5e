package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"

	"github.com/drainkit/drainkit/internal/pid1"
	"github.com/drainkit/drainkit/internal/termmsg"
	"github.com/drainkit/drainkit/pause"
)

func main() {
	pid1.Init() // as PID 1 of the pod's PID namespace: reap runsc's orphans, forward signals
	os.Exit(Main(context.Background(), os.Args[1:], os.Stderr))
}

// Main runs the worker and returns its exit status: 0 after a clean shutdown, 1 when the
// shutdown lost sandboxes, the worker could not start (a -termination-log it cannot
// write in included), its serving stopped on its own (it
// then drained at once: serve) or the Report could not be written, 2 for bad usage (a
// -grace too short for the plan included). After a drain its last line, "gvisor-worker
// exiting", counts the sandboxes preserved and lost, at ERROR with every reason for a 1.
// When it could not start (bad usage included) the termination message says why. Once the worker holds its signals (its flags valid)
// and until the process exits, a SIGTERM ends nothing: it drains, or, once the drain is
// over or the start failed, it is dropped; the caller must exit with the status Main
// returns.
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		// The pod's last state says why, as for a newWorker that fails: a refused flag
		// was a crash loop with exit 2 and nothing else (docs/faults.md rows 1017, 1074).
		// The flags after an unknown one are not parsed: the path is then the
		// environment's or the default.
		startFailed(cfg, err, stderr, logger)
		return 2
	}
	// A -termination-log (or $DRAINKIT_TERMINATION_LOG) that cannot be written was found
	// at exit, after the whole drain: the summary lost with a WARN line, the exit status 0
	// (docs/faults.md rows 1240, 1321). A path naming a directory is bad usage (2); one
	// the machine refuses (its directory missing or read-only) exits 1, as a newWorker
	// that fails.
	if err := termmsg.Check(cfg.TerminationLog); err != nil {
		startFailed(cfg, err, stderr, logger)
		if errors.As(err, new(syscall.Errno)) {
			return 1
		}
		return 2
	}
	cfg.exits = true // SIGTERM caught until the exit
	w, err := newWorker(cfg, logger)
	if err != nil {
		startFailed(cfg, err, stderr, logger)
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	rep, runErr := w.serve(ctx)
	if runErr != nil {
		fmt.Fprintln(stderr, "gvisor-worker:", runErr)
	}
	// The last line says every reason for exit status 1 at ERROR, counting the sandboxes,
	// as sandboxd's does (docs/faults.md row 1114): a Report that could not be written (a
	// full state directory) was a bare line with no level (row 1139).
	preserved := 0
	if rep.Preserve != nil {
		preserved = rep.Preserve.Counts[pause.Preserved]
	}
	attrs := []any{"preserved", preserved, "lost", rep.Lost(), "headroom", rep.Headroom}
	if err := errors.Join(runErr, rep.Err()); err != nil {
		logger.Error("gvisor-worker exiting", append(attrs, "err", err)...)
		return 1
	}
	logger.Info("gvisor-worker exiting", attrs...)
	return 0
}

// startFailed says why the worker could not start with cfg, on stderr and in the
// termination message (termmsg.StartFailed): the kubelet's default
// terminationMessagePolicy, File, does not fall back to the log.
func startFailed(cfg config, err error, stderr io.Writer, logger *slog.Logger) {
	fmt.Fprintln(stderr, "gvisor-worker:", err)
	if werr := termmsg.WriteStartFailed("gvisor-worker", cfg.TerminationLog, err); werr != nil {
		logger.Warn("termination message not written", "error", werr)
	}
}
