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
	if err := store.WriteFile(filepath.Join(cfg.StateDir, "last-shutdown.json"), data, 0o600); err != nil {
		fmt.Fprintln(stderr, "gvisor-worker:", err)
		return 1
	}
	if rep.Err() != nil {
		return 1
	}
	return 0
}
