package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/drainkit/drainkit/internal/termmsg"
)

// Main runs sandboxd with the command-line args (without the program name), logging to
// stderr, and returns the exit status: 0 after a clean shutdown, 1 when the shutdown's
// Report has an error (sandboxes lost, a step failed, SIGKILL's time passed: see
// drain.Report.Err), the server could not start, its API or preStop hook stopped serving on
// its own (Server.Run) or the Report could not be written, 2 for
// bad usage (a -grace too short for the plan included), as drain.Server.Run does. The calling binary's main must call
// fakeublk.MainIfDaemon first.
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	cfg, err := ParseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "sandboxd:", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	s, err := New(ctx, cfg, logger)
	if err != nil {
		fmt.Fprintln(stderr, "sandboxd:", err)
		path, explicit := termmsg.Path(cfg.TerminationLog)
		if _, werr := termmsg.Write(path, explicit, termmsg.StartFailed("sandboxd", err)); werr != nil {
			logger.Warn("termination message not written", "error", werr)
		}
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	rep, err := s.Run(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "sandboxd:", err)
		return 1
	}
	if err := rep.Err(); err != nil {
		logger.Error("sandboxd exiting", "preserved", preserved(rep.Preserve), "lost", rep.Lost(), "headroom", rep.Headroom, "err", err)
		return 1
	}
	logger.Info("sandboxd exiting", "preserved", preserved(rep.Preserve), "lost", rep.Lost(), "headroom", rep.Headroom)
	return 0
}
