//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/loopdev"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
	"github.com/drainkit/drainkit/internal/ublkctl"
	"github.com/drainkit/drainkit/internal/ublkhook"
	"github.com/drainkit/drainkit/ublk"
)

// The supervisor's daemon step runs ublk's last resort with its defaults.
// The server dies on its own; a "VMM" (a child of this test, so in the
// supervisor's cgroup: the supervisor's exit takes it anyway) holds the
// daemon's disk and never closes it. At the last-resort point the step
// SIGKILLs it, the daemon, asked to stop, stops its devices and exits 0,
// and the supervisor's report names the holder it killed and why.
//
// The grace sets how long the daemon has for that: the holder wait runs to
// the last-resort point, where only the step's reserve is left
// (stepReserve: grace/10, at least 0.5 s), split 3:2:3:2 between the last
// resort, the daemon's own stop, the control fallback and the kill; the
// daemon is killed at the kill's part once its devices are gone. Under two
// CPU burners on 2 loaded cores, from the last-resort point to the daemon's
// exit took 78-400 ms, and 1.26 s once: with a 4 s grace (0.5 s reserve,
// the kill at 0.4 s) a run whose last resort stalled 215 ms was killed
// after deleting its device itself. A 20 s grace (2 s reserve: the
// deadline by which the daemon must have deleted its device 2 s after the
// last-resort point) leaves the slowest run measured 1.6 times its time;
// whether the daemon then also exits before the kill's part (1.6 s) is
// load's to decide, so the test asserts the safety rule instead: a daemon
// killed is killed only once no device is live.
func TestSupervisorDaemonStepKillsDoomedHolderAtTheLastResort(t *testing.T) {
	// Its last resort reads the real /proc: a possible holder of every
	// device that another package's test runs meanwhile, in the same cgroup,
	// would be killed too.
	loopdev.LockPossibleHolders(t)
	node, dev := loopdev.Attach(t)
	dir := t.TempDir()
	report, events := filepath.Join(dir, "report.json"), filepath.Join(dir, "daemon.log")
	cfg := fakeublk.DaemonConfig{
		SysRoot:  filepath.Join(dir, "sys"),
		Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: dev.Major, Minor: dev.Minor}}, // the disk is the loop device
		Socket:   filepath.Join(dir, "ublkd.sock"),
		EventLog: events,
	}
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	require.False(t, strings.ContainsAny(string(b), " \t\n"), "-daemon cannot carry spaces: %s", b)

	// The VMM: its stdin is the disk; this process keeps no fd on it (it
	// shares the supervisor's cgroup and would be doomed too).
	disk, err := os.Open(node)
	require.NoError(t, err)
	vmm := exec.Command("sleep", "120")
	vmm.Stdin = disk
	require.NoError(t, vmm.Start())
	disk.Close()
	vmmDone := make(chan struct{})
	go func() { _ = vmm.Wait(); close(vmmDone) }()
	t.Cleanup(func() { _ = vmm.Process.Kill(); <-vmmDone })

	listen, api := freeAddr(t), freeAddr(t)
	sup := startSupervisor(t,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "20s", "-report", report,
			"-ublk-kernel", "vulnerable=*", "-daemon", strings.Join(helperCommand("daemon", string(b)), " ")},
		helperCommand("stubserver", "-listen", api, "-die-when", filepath.Join(dir, "die"), "-exit", "3"),
		EnvSysfsRoot+"="+cfg.SysRoot)
	daemonStarted(t, events) // a SIGTERM before its handler would kill it, and no last resort would run
	require.NoError(t, os.WriteFile(filepath.Join(dir, "die"), nil, 0o644))
	assert.Equal(t, 3, sup.exitCode(t, time.Minute), "the server's status")

	select {
	case <-vmmDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the VMM is still running")
	}
	ws := vmm.ProcessState.Sys().(syscall.WaitStatus)
	assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the VMM was SIGKILLed: %v", ws)

	rep := readReport(t, report)
	require.NotNil(t, rep.Ublk)
	t.Log(rep.Ublk.String())
	assert.Equal(t, ublk.KernelVulnerable, rep.Ublk.KernelClass)
	require.NotNil(t, rep.Ublk.LastResort, "the last resort ran")
	killed := rep.Ublk.LastResort.Killed()
	require.Len(t, killed, 1, "%+v", rep.Ublk.LastResort.Holders)
	assert.Equal(t, vmm.Process.Pid, killed[0].Holder.PID)
	assert.Contains(t, killed[0].Reason, "in the server's cgroup")
	assert.Equal(t, ublk.VerdictStopped, rep.Ublk.Verdict, "the daemon stopped and deleted its device itself")
	assert.True(t, rep.Ublk.Daemon.Requested && rep.Ublk.Daemon.Exited)
	assert.Contains(t, readFile(t, events), "delete 0")
	require.NotNil(t, rep.Daemon)
	if kill := rep.Ublk.Step("kill daemon"); rep.Ublk.Daemon.Killed {
		// Its device gone, a daemon that has not exited by the kill's part
		// of the reserve is killed: safe even on this vulnerable kernel.
		require.NotNil(t, kill)
		assert.Contains(t, kill.Result, "no live device left", "never killed while its device was live")
		t.Logf("the daemon was killed after deleting its device: %s (%s)", kill.Result, rep.Daemon)
	} else {
		assert.Nil(t, kill)
		assert.Equal(t, "exited 0", rep.Daemon.String())
		assert.Contains(t, readFile(t, events), "exit")
	}
}

// fakeControl is /dev/ublk-control for a fake device: every device is
// live with no flag, and each command is recorded.
type fakeControl struct {
	mu    sync.Mutex
	calls []string
}

func (c *fakeControl) record(s string) { c.mu.Lock(); c.calls = append(c.calls, s); c.mu.Unlock() }
func (c *fakeControl) DevInfo(_ context.Context, id int) (ublkctl.DevInfo, error) {
	return ublkctl.DevInfo{State: ublkctl.StateLive, DevID: uint32(id), NrHWQueues: 1, QueueDepth: 1}, nil
}
func (c *fakeControl) StopDev(_ context.Context, id int) error {
	c.record(fmt.Sprint("STOP_DEV ", id))
	return nil
}
func (c *fakeControl) DelDev(_ context.Context, id int) error {
	c.record(fmt.Sprint("DEL_DEV ", id))
	return nil
}
func (c *fakeControl) Close() error { return nil }

// Fault: the server's own daemon (-daemon-socket), found by its socket and
// pinned by a pidfd, was given to the ublk step as the supervisor's own
// type, from which the step cannot read a PID: to the step it was a daemon
// whose process is not known. At the last resort, a device held by kernel
// state (here a mount) whose daemon dies with the pod is to be stopped
// under its holders, so the daemon exits with no live device; for the
// server's daemon the step said "held devices left live: the daemon's
// process is not known", left the device live, never asked the daemon to
// stop (HeldError), and left it to die at SIGKILL with the device live.
// The step now has the daemon's PID, as for the -daemon child.
func TestServersDaemonHeldByKernelStateIsStoppedAtTheLastResort(t *testing.T) {
	loopdev.LockPossibleHolders(t) // the step reads the real /proc
	_, dev, _ := loopdev.Mounted(t, "ext4")
	dir := t.TempDir()
	sock, events := filepath.Join(dir, "ublkd.sock"), filepath.Join(dir, "daemon.log")
	b, err := json.Marshal(fakeublk.DaemonConfig{SysRoot: filepath.Join(dir, "sys"), Socket: sock, EventLog: events,
		Devices: []fakeublk.DeviceSpec{{ID: 0, Major: dev.Major, Minor: dev.Minor}}}) // the disk is the mounted loop device
	require.NoError(t, err)
	d := helperCmd(helperCommand("daemon", string(b)))
	d.Stdout = nil
	require.NoError(t, d.Start()) // the test process plays the server: the daemon is its child
	t.Cleanup(func() { _ = d.Process.Kill(); _ = d.Wait() })
	require.Eventually(t, func() bool { _, err := peerPid(sock); return err == nil }, 10*time.Second, 10*time.Millisecond)

	cfg, err := parseArgs([]string{"-daemon-socket", sock, "-ublk-kernel", "vulnerable=*", "--", "server"}, io.Discard)
	require.NoError(t, err)
	var logs bytes.Buffer
	s, err := newSupervisor(cfg, &logs)
	require.NoError(t, err)
	defer s.learned.Close()
	defer s.owned.close()
	ctl := &fakeControl{}
	tcfg := ublk.Config{Kernels: cfg.kernels, Reserve: 2 * time.Second, Logger: s.log}
	ublkhook.Set(&tcfg, ublkhook.Hooks{SysfsRoot: filepath.Join(dir, "sys"),
		OpenControl: func(context.Context) (ublkctl.Controller, error) { return ctl, nil }})
	td, err := ublk.New(s.teardownDaemon(), tcfg) // the daemon as the supervisor gives it to its step
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	rep, err := td.Stop(ctx)
	t.Log(rep.String())
	var held *ublk.HeldError
	require.False(t, errors.As(err, &held), "the device left live under its mount, the daemon never asked: %v", err)
	var stopped *ublk.StoppedHeldError
	require.ErrorAs(t, err, &stopped)
	assert.Equal(t, []string{"STOP_DEV 0"}, ctl.calls, "STOP_DEV while the daemon serves it")
	assert.True(t, rep.Daemon.Requested, "the daemon asked to stop")
	assert.Contains(t, readFile(t, events), "exit", "the daemon exited with no live device")
}
