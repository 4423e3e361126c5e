package statedir_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/drainkit/drainkit/internal/statedir"
)

// open is a server's start: the lock first, then the directory's contents.
func open(ctx context.Context, stateDir string, logger *slog.Logger) error {
	lock, err := statedir.Acquire(ctx, stateDir, statedir.Config{Logger: logger})
	if err != nil {
		return err // ctx ended (its SIGTERM: internal/startsig) while another server held the directory
	}
	defer lock.Release()
	entries, err := os.ReadDir(stateDir) // now this server's alone
	if err != nil {
		return err
	}
	for _, e := range entries {
		fmt.Println(e.Name())
	}
	return nil
}

// A server takes its state directory's lock before it touches anything in it.
func Example() {
	dir, err := os.MkdirTemp("", "state")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	if err := open(context.Background(), dir, slog.New(slog.DiscardHandler)); err != nil {
		fmt.Println(err)
	}
	// Output: state.lock
}
