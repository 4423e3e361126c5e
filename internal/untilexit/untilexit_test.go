package untilexit

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/signame"
)

// childEnv names the signals a re-executed test binary keeps, then the one it sends
// itself: "SIGTERM,SIGINT:SIGTERM".
const childEnv = "UNTILEXIT_CHILD"

// TestMain runs the tests, or, re-executed by them, a process that keeps and sends
// signals (child).
func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(childEnv); ok {
		os.Exit(child(spec))
	}
	goleak.VerifyTestMain(m)
}

// signals maps the names the tests use to the signals.
var signals = map[string]os.Signal{"SIGTERM": syscall.SIGTERM, "SIGINT": os.Interrupt}

// child keeps the signals spec names before its colon (Keep), sends itself the one
// after it, then SIGWINCH, which it handles: the kernel delivers the lower-numbered
// signal first, so once SIGWINCH has come the first signal has come and gone. It
// prints "alive" and exits 0 if it is still running then.
func child(spec string) int {
	kept, send, _ := strings.Cut(spec, ":")
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	var keep []os.Signal
	for _, name := range strings.Split(kept, ",") {
		if name != "" {
			keep = append(keep, signals[name])
		}
	}
	Keep(keep...)
	self := os.Getpid()
	if err := syscall.Kill(self, signals[send].(syscall.Signal)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := syscall.Kill(self, syscall.SIGWINCH); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	<-winch
	fmt.Println("alive")
	return 0
}

// runChild runs the child of spec and returns its output and the signal that ended it
// (nil when it exited by itself, with status 0).
func runChild(t *testing.T, spec string) (string, os.Signal) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+spec)
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		ws, ok := exit.Sys().(syscall.WaitStatus)
		require.True(t, ok && ws.Signaled(), "the child (%s) ended with %v, not by a signal: %s", spec, err, exit.Stderr)
		return string(out), ws.Signal()
	}
	require.NoError(t, err, spec)
	return string(out), nil
}

// A SIGTERM that comes once Keep was called is dropped: the process goes on to its exit,
// as a server that drained goes on to write its Report. Without Keep the same SIGTERM
// ends the child, so the child would see it.
func TestKeptSIGTERMDoesNotEndTheProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	_, sig := runChild(t, ":SIGTERM")
	assert.Equal(t, syscall.SIGTERM, sig, "with nothing kept, SIGTERM has its default action")
	for _, kept := range []string{"SIGTERM", "SIGTERM,SIGINT"} {
		out, sig := runChild(t, kept+":SIGTERM")
		assert.Nil(t, sig, "kept %s: ended by %v", kept, sig)
		assert.Equal(t, "alive\n", out, "kept %s", kept)
	}
}

// SIGINT is never kept, even when named: a person's Ctrl-C once the drain is over ends
// the process, as they asked. And Keep given SIGINT alone keeps nothing, where
// signal.Notify given no signal would catch every one, SIGTERM included.
func TestSIGINTIsNeverKept(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	_, sig := runChild(t, "SIGTERM,SIGINT:SIGINT")
	assert.Equal(t, syscall.SIGINT, sig, "SIGINT keeps its default action: %s", signame.Name(sig))
	_, sig = runChild(t, "SIGINT:SIGTERM")
	assert.Equal(t, syscall.SIGTERM, sig, "nothing kept: SIGTERM keeps its default action")
}
