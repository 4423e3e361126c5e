//go:build linux

package ublkguest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// holderEnv makes the re-executed test binary a holder of the device path
// it names.
const holderEnv = "DRAINKIT_UBLKGUEST_HOLD"

// Holder is a "VMM": a separate process that keeps a block device open, as
// a Firecracker process keeps its drive, until it is told to let go.
type Holder struct {
	Cmd *exec.Cmd
	out *bufio.Reader
}

// StartHolder starts a holder of path and returns once it has the device
// open.
func StartHolder(ctx context.Context, path string) (*Holder, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), holderEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &Holder{Cmd: cmd, out: bufio.NewReader(stdout)}
	if _, err := h.line(ctx, "open"); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("holder of %s: %w", path, err)
	}
	return h, nil
}

// line reads the holder's next line, which must start with want, and
// returns the rest; it gives up when ctx ends (and then kills the holder,
// which ends the read).
func (h *Holder) line(ctx context.Context, want string) (string, error) {
	stop := context.AfterFunc(ctx, func() { _ = h.Cmd.Process.Kill() })
	defer stop()
	s, err := h.out.ReadString('\n')
	if err != nil {
		return "", errors.Join(err, ctx.Err())
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), want)
	if !ok {
		return "", fmt.Errorf("holder said %q, want %q", s, want)
	}
	return strings.TrimSpace(rest), nil
}

// Release tells the holder to close the device (SIGTERM) and returns when
// it closed it, the time it did, after the process has exited.
func (h *Holder) Release(ctx context.Context) (time.Time, error) {
	if err := h.Cmd.Process.Signal(unix.SIGTERM); err != nil {
		return time.Time{}, err
	}
	rest, err := h.line(ctx, "closed")
	if err != nil {
		return time.Time{}, err
	}
	ns, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	_, _ = io.Copy(io.Discard, h.out)
	return time.Unix(0, ns), h.Cmd.Wait()
}

// Kill ends the holder at once and reaps it; for cleanups.
func (h *Holder) Kill() {
	_ = h.Cmd.Process.Kill()
	_ = h.Cmd.Wait()
}

// MaybeHolder runs the holder and exits when this process was started by
// StartHolder, and returns at once otherwise. Call it early in TestMain.
func MaybeHolder() {
	path, ok := os.LookupEnv(holderEnv)
	if !ok {
		return
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, unix.SIGTERM)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		os.Exit(1)
	}
	fmt.Println("open")
	<-term
	f.Close()
	fmt.Println("closed", time.Now().UnixNano())
	os.Exit(0)
}
