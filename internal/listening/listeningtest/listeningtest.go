package listeningtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// UnixNamesShownOtherwise returns, by what makes each odd, Unix socket
// names that /proc/net/unix shows otherwise than Go does: a path with a
// space and one with a newline in it (the table separates its fields with
// spaces and its lines with newlines), in a directory of their own that
// the test's end removes, and an abstract name with NULs inside (the table
// shows '@' for each; Go's name of a connection on it ends at the first),
// "@" + first + NUL + the process's ID + NUL + last. No socket is made.
func UnixNamesShownOtherwise(t testing.TB, first, last string) map[string]string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dk") // short: a socket's path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return map[string]string{
		"space":               filepath.Join(dir, "grpc agent.sock"),
		"newline":             filepath.Join(dir, "grpc\nagent.sock"),
		"abstract, with NULs": fmt.Sprintf("@%s\x00%d\x00%s", first, os.Getpid(), last),
	}
}
