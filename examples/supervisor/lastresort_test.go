//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/loopdev"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
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
