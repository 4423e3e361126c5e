//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/pid1/pid1test"
	"github.com/drainkit/drainkit/internal/realpart"
)

// Exit statuses of the ownedpidreuse helper for a missing real part.
const (
	exitOwnedNoPIDControl = 5 // ns_last_pid cannot be written
	exitOwnedNoReuse      = 6 // the PID was never reused in ten tries
)

// ownedPidReuse, PID 1 of a PID namespace of its own and playing the server, starts its
// daemon and looks for it by its socket; between the socket's answer and the pidfd, the
// daemon dies and is reaped, and another child of the server (sleep) gets its PID, through
// ns_last_pid. It prints what find said and whether the pidfd pinned the sleep, and
// whether a Kill through it reached the sleep.
func ownedPidReuse() int {
	dir, err := os.MkdirTemp("", "owned")
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer os.RemoveAll(dir)
	for try := range 10 {
		sock := filepath.Join(dir, fmt.Sprintf("ublkd-%d.sock", try))
		cfg, _ := json.Marshal(fakeublk.DaemonConfig{SysRoot: filepath.Join(dir, fmt.Sprint("sys-", try)), Socket: sock, Silent: true,
			Devices: []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}}})
		daemon := helperCmd(helperCommand("daemon", string(cfg)))
		daemon.Stdout = nil
		if err := daemon.Start(); err != nil {
			fmt.Println(err)
			return 1
		}
		for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
			if _, err := peerPid(sock); err == nil {
				break
			} else if time.Since(start) > 10*time.Second {
				fmt.Println("the daemon never listened:", err)
				return 1
			}
		}
		pid := daemon.Process.Pid
		var reuser *exec.Cmd
		var hookErr error
		findHook = func(int) {
			findHook = func(int) {}
			_ = daemon.Process.Kill()
			_ = daemon.Wait()
			if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
				hookErr = err
				return
			}
			reuser = exec.Command("sleep", "30")
			hookErr = reuser.Start()
		}
		o := newOwnedDaemon(sock, slog.New(slog.DiscardHandler), func() (int, bool) { return os.Getpid(), true })
		ferr := o.find()
		if hookErr != nil {
			fmt.Println("ns_last_pid:", hookErr)
			return exitOwnedNoPIDControl
		}
		if reuser.Process.Pid != pid {
			_ = reuser.Process.Kill()
			_ = reuser.Wait()
			o.close()
			continue
		}
		st := o.state()
		fmt.Printf("pid %d reused; find: %v; pinned pid %d, exited %v\n", pid, ferr, st.Pid, st.Exited)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = o.Kill(ctx)
		cancel()
		o.close()
		// The signal it dies of says whether the daemon's Kill reached it: a
		// SIGKILL sent before this SIGTERM is the one it exits with, however
		// long a loaded machine takes to run its exit.
		_ = reuser.Process.Signal(syscall.SIGTERM)
		_ = reuser.Wait()
		if ws := reuser.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			fmt.Println("the process that reused the pid was killed")
		} else {
			fmt.Println("the process that reused the pid was untouched")
		}
		return 0
	}
	fmt.Println("the PID was not reused in ten tries")
	return exitOwnedNoReuse
}

// Fault (a review of the daemon found by its socket): find read the listener's PID
// (SO_PEERCRED), checked it in the server's tree by that PID, then pinned it with a pidfd
// opened by the PID, and checked the tree again. A daemon that died in between (a crash
// as the server's drain began) left its PID free, and another descendant of the server
// that took it passed both checks: its pidfd was taken for the daemon's, the Report named
// it, and the teardown's Kill reached it. The listener is now pinned by the socket itself
// (SO_PEERPIDFD) before anything is read by its PID, and the pidfd opened by PID is
// taken only if that listener still runs once it is open: then the PID named it all
// along. The PID is reused for real, in a PID namespace of the test's own.
//
//	the daemon listens -> find reads its pid -> the daemon dies, a sleep of the
//	  server's gets its pid -> before: the sleep pinned, killed by the teardown;
//	  after: find fails, nothing pinned, the sleep untouched
func TestOwnedDaemonFoundByItsSocketNeverPinsTheProcessThatReusedItsPID(t *testing.T) {
	if os.Getuid() != 0 {
		realpart.Missing(t, "a PID namespace of the test's own needs root")
	}
	cmd := helperCmd(helperCommand("ownedpidreuse"))
	cmd.Env = append(cmd.Env, pid1test.ProcEnv+"=1")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	p := pid1test.StartPID1(t, cmd)
	err := p.Wait(t, time.Minute, "the helper did not end")
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && (exitErr.ExitCode() == exitOwnedNoPIDControl || exitErr.ExitCode() == exitOwnedNoReuse) {
		realpart.Missing(t, "the PID could not be reused on purpose: "+strings.TrimSpace(out.String()))
	}
	require.NoError(t, err, out.String())
	t.Log(strings.TrimSpace(out.String()))
	assert.Contains(t, out.String(), "pinned pid 0,", "the process that reused the daemon's pid was pinned as the daemon")
	assert.Contains(t, out.String(), "the process that reused the pid was untouched")
}

// The listener is pinned by the socket itself where the kernel can (SO_PEERPIDFD, Linux
// 6.5): no PID is read before its pidfd.
func TestOwnedDaemonsListenerIsPinnedByItsSocket(t *testing.T) {
	d, sock := startDaemon(t)
	pid, listener, err := peer(sock)
	require.NoError(t, err)
	assert.Equal(t, d.Process.Pid, pid)
	if listener == nil {
		realpart.Missing(t, "the kernel has no SO_PEERPIDFD (Linux 6.5): the socket is asked again instead")
	}
	defer listener.Close()
	assert.Equal(t, pid, listener.Pid())
	assert.True(t, stillListening(sock, pid, listener))
	require.NoError(t, d.Process.Kill())
	_ = d.Wait()
	assert.False(t, stillListening(sock, pid, listener), "the listener exited")
}
