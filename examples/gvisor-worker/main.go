// Command gvisor-worker is the agent-substrate ateom shape done right: a gRPC worker on a
// Unix socket that runs gVisor sandboxes through runsc (Run), checkpoints them (Checkpoint)
// and restores them (Restore), and gets them through the pod's termination with drainkit.
//
//	gvisor-worker -state-dir /var/lib/worker -grace 1h -concurrency 8
//
// On SIGTERM: Run and Restore answer codes.Unavailable while Checkpoint stays allowed (an
// actor may still suspend itself); every live sandbox is checkpointed in parallel inside
// the budget the grace period leaves (not a fixed minute); a sandbox that could not be
// checkpointed gets SIGTERM, a bounded grace and SIGKILL (pause.Escalation), where a failed
// `runsc wait` is never mistaken for an exit; gRPC GracefulStop is bounded and followed by
// Stop. The Report goes to STATE_DIR/last-shutdown.json; the exit status is 0 when every
// sandbox was checkpointed and every step ended in time. A restarted worker loads the
// checkpoints and Restore resumes each sandbox where it was.
//
// The service is defined by hand (api.go) with a JSON codec: no protoc.
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
)

func main() {
	os.Exit(Main(context.Background(), os.Args[1:], os.Stderr))
}

// Main runs the worker and returns its exit status: 0 after a clean shutdown, 1 when the
// shutdown lost sandboxes or the worker could not start, 2 for bad usage.
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
		return 1
	}
	rep := w.serve(ctx)
	data, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.StateDir, "last-shutdown.json"), data, 0o600); err != nil {
		fmt.Fprintln(stderr, "gvisor-worker:", err)
		return 1
	}
	if rep.Err() != nil {
		return 1
	}
	return 0
}
