package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/termmsg"
)

// Fault (row 1321, as sandboxd's row 1240): the worker did not check at start the
// termination message path it was given. A -termination-log in a missing directory, or
// one naming a directory, was found at exit, after the whole drain: the drain's summary
// lost with one WARN line and exit status 0. It now fails the start naming the flag (or
// the variable) and the path: 1 for what the machine refused, 2 for a directory.
// Before: the worker served in all three cases; after: exit 1, 2, 1, no socket.
func TestTerminationLogItCannotWriteFailsTheStart(t *testing.T) {
	tmp := t.TempDir()
	missing := filepath.Join(tmp, "missing", "termination-log")
	for _, c := range []struct {
		name string
		env  bool // the path from DRAINKIT_TERMINATION_LOG; else from -termination-log
		path string
		code int
		why  string
	}{
		{"a -termination-log in a missing directory", false, missing, 1, "-termination-log " + missing + ": open " + missing + ": no such file or directory"},
		{"a -termination-log that is a directory", false, tmp, 2, "-termination-log " + tmp + " is a directory: name a file"},
		{"a DRAINKIT_TERMINATION_LOG in a missing directory", true, missing, 1, "$" + termmsg.EnvPath + " " + missing + ": open " + missing},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			sock := filepath.Join(dir, "worker.sock")
			args := []string{"-state-dir", dir, "-socket", sock, "-runtime", "fake", "-pause-latency", "10ms", "-grace", "10s"}
			if c.env {
				t.Setenv(termmsg.EnvPath, c.path)
			} else {
				t.Setenv(termmsg.EnvPath, "")
				args = append(args, "-termination-log", c.path)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stderr logbuf.Buffer
			exit := make(chan int, 1)
			go func() { exit <- Main(ctx, args, &stderr) }()
			var code int
			served, exited := false, false
			require.Eventually(t, func() bool { // a bound on the failure, not a timing assertion
				select {
				case code = <-exit:
					exited = true
				default:
					_, err := os.Stat(sock)
					served = err == nil
				}
				return exited || served
			}, 20*time.Second, 10*time.Millisecond, "the worker neither served nor exited: %s", &stderr)
			if !exited {
				cancel() // the drain, as the kubelet's SIGTERM would start it
				code = <-exit
			}
			assert.False(t, served, "the worker is not started: %s", &stderr)
			assert.Equal(t, c.code, code, "%s", &stderr)
			assert.Contains(t, stderr.String(), c.why)
		})
	}
}
