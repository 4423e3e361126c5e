package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"syscall"

	"github.com/drainkit/drainkit/internal/termmsg"
)

// Main runs sandboxd with the command-line args (without the program name), logging to
// stderr, and returns the exit status: 0 after a clean shutdown, 1 when the shutdown's
// Report has an error (sandboxes lost, a step failed, SIGKILL's time passed: see
// drain.Report.Err), the server could not start (a -termination-log it cannot write
// included: checked before the server starts, not at exit), its API or preStop hook
// stopped serving on its own (Server.Run) or the Report could not be written, 2 for bad
// usage (a -grace too short for the plan, a -termination-log naming a directory
// included), as drain.Server.Run does. When it
// could not start (bad usage included) the termination message says why. Once New holds
// the signals (its configuration valid) and until the process exits, a SIGTERM ends
// nothing: it drains, or, once the drain is over or the start failed, it is dropped. The
// calling binary's main must call fakeublk.MainIfDaemon first and exit with the status Main
// returns.
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	cfg, err := ParseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		// The pod's last state says why, as for a New that fails: a bad flag in the
		// manifest (a SANDBOXD_HOOK_SECRET its Secret no longer gives, a mistyped flag)
		// is a crash loop whose reason was in the log alone (docs/faults.md row 1017).
		// The flags after an unknown one are not parsed: the path is then the
		// environment's or the default.
		startFailed(cfg, err, stderr, logger)
		return 2
	}
	// A -termination-log (or $DRAINKIT_TERMINATION_LOG) that cannot be written was found
	// at exit, after the whole drain: the summary lost with a WARN line, the exit status 0
	// (docs/faults.md row 1240). A path naming a directory is bad usage (2); one the
	// machine refuses (its directory missing or read-only) exits 1, as a New that fails.
	if err := termmsg.Check(cfg.TerminationLog); err != nil {
		startFailed(cfg, err, stderr, logger)
		if errors.As(err, new(syscall.Errno)) {
			return 1
		}
		return 2
	}
	s, err := newServer(ctx, cfg, logger, true) // SIGTERM caught until the exit
	if err != nil {
		startFailed(cfg, err, stderr, logger)
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 1
	}
	rep, runErr := s.Run(ctx)
	if runErr != nil {
		fmt.Fprintln(stderr, "sandboxd:", runErr)
	}
	// The last line says every reason for exit status 1 at ERROR: a Report that could not
	// be written (a full state directory) was a bare line with no level, and no
	// "sandboxd exiting" line counted the sandboxes (docs/faults.md row 1114).
	attrs := []any{"preserved", preserved(rep.Preserve), "lost", rep.Lost(), "headroom", rep.Headroom}
	if err := errors.Join(runErr, rep.Err()); err != nil {
		logger.Error("sandboxd exiting", append(attrs, "err", err)...)
		return 1
	}
	logger.Info("sandboxd exiting", attrs...)
	return 0
}

// startFailed says why sandboxd could not start with cfg, on stderr and in the termination
// message (termmsg.StartFailed): the kubelet's default terminationMessagePolicy, File, does
// not fall back to the log.
func startFailed(cfg Config, err error, stderr io.Writer, logger *slog.Logger) {
	fmt.Fprintln(stderr, "sandboxd:", err)
	if werr := termmsg.WriteStartFailed("sandboxd", cfg.TerminationLog, err); werr != nil {
		logger.Warn("termination message not written", "error", werr)
	}
}
