//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/drain"
	"github.com/drainkit/drainkit/examples/internal/servingtest"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// A client that takes the worker's socket file for the worker (the tests' waitSocket, a
// script, a probe testing for the file) connects as soon as the file exists. net.Listen
// created the file when it bound and listened only after: a connection in between was
// refused, "connect: connection refused", which failed
// TestReportIsWrittenBeforeATimeoutDeletionEnds and
// TestSecondWorkerWaitsForTheStateDirectoryUntilTheFirstExits on two loaded cores. The
// socket is now bound and listening under another name, then renamed to -socket: it never
// appears there by a bind, only by the rename, and is gone when the worker has exited.
func TestSocketAppearsOnlyOnceTheWorkerListens(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "worker.sock")
	events := watchDir(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr logbuf.Buffer
	exit := make(chan int, 1)
	go func() {
		exit <- Main(ctx, []string{"-state-dir", dir, "-runtime", "fake", "-pause-latency", "10ms"}, &stderr)
	}()
	defer func() { cancel(); <-exit }()
	waitSocket(t, sock, &stderr)
	_, err := dial(t, sock).List(context.Background())
	require.NoError(t, err, "%s", &stderr)

	seen := events()
	assert.NotContains(t, seen, "created worker.sock", "the socket was bound at -socket, before it listened")
	assert.Contains(t, seen, "moved in worker.sock", "the listening socket is renamed to -socket")

	cancel()
	require.Equal(t, 0, <-exit, "%s", &stderr)
	exit <- 0
	_, err = os.Stat(sock)
	assert.ErrorIs(t, err, os.ErrNotExist, "the socket is removed at exit")
	_, err = os.Stat(filepath.Join(dir, ".worker.sock.new"))
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing is left at the name it was bound at")
}

// A -socket too long for a Unix socket once the hidden name it is bound at is made from
// it is refused at start, naming the path and the limit, not with bind's "invalid argument".
func TestSocketPathTooLongIsRefusedNamingTheLimit(t *testing.T) {
	dir := t.TempDir()
	long := filepath.Join(dir, string(bytes.Repeat([]byte("s"), maxSocketPath-len(dir)-1)))
	var stderr logbuf.Buffer
	code := Main(context.Background(), []string{"-state-dir", dir, "-runtime", "fake", "-pause-latency", "10ms",
		"-socket", long}, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "-socket: "+long+": too long for a Unix socket")
	assert.Contains(t, stderr.String(), "at most 107 fit")
}

// watchDir watches dir for files created in it and moved into it, and returns a function
// that returns what was seen so far, one "created NAME" or "moved in NAME" each.
func watchDir(t *testing.T, dir string) func() []string {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	_, err = unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO)
	require.NoError(t, err)
	var seen []string
	return func() []string {
		buf := make([]byte, 64<<10)
		for {
			n, err := unix.Read(fd, buf)
			if errors.Is(err, unix.EAGAIN) {
				return seen
			}
			require.NoError(t, err)
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				mask := binary.NativeEndian.Uint32(buf[off+4:])
				size := int(binary.NativeEndian.Uint32(buf[off+12:]))
				name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+size], "\x00"))
				if mask&unix.IN_MOVED_TO != 0 {
					seen = append(seen, "moved in "+name)
				} else {
					seen = append(seen, "created "+name)
				}
				off += unix.SizeofInotifyEvent + size
			}
		}
	}
}

// Fault: the worker's gRPC serving could stop on its own (its socket's Accept failing for
// good) and its error was thrown away (`_ = w.grpc.Serve(w.ln)`): no line said so, and the
// worker sat unreachable, its sandboxes out of every client's reach, until its SIGTERM,
// then exited 0 from a clean Report. As drain.Server.Run does, the failure is now logged
// at ERROR when it stops, the worker drains at once, as at SIGTERM (its sandboxes
// checkpointed while it still holds them, the budget counted from then), and serve's
// error makes Main exit 1.
func TestServingThatStopsDrainsAtOnceAndExitsOne(t *testing.T) {
	var logs logbuf.Buffer
	cfg := fakeConfig(t)
	cfg.PauseLatency = 50 * time.Millisecond
	w, err := newWorker(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		rep *drain.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := w.serve(ctx)
		done <- result{rep, err}
	}()
	_, err = dial(t, cfg.Socket).Run(context.Background(), &RunRequest{})
	require.NoError(t, err)
	closed := time.Now()
	require.NoError(t, w.ln.Close()) // Accept fails for good: serving stops

	var res result
	select {
	case res = <-done:
	case <-time.After(20 * time.Second): // no SIGTERM comes: only serving's end drains
		cancel()
		<-done
		t.Fatalf("the worker still up 20 s after it stopped serving, not draining:\n%s", logs.String())
	}
	servingtest.DrainedAtOnce(t, res.rep, res.err, logs.String(), closed, "serving gRPC stopped")
}
