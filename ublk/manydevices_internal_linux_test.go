//go:build linux

package ublk

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/realpart"
)

// A node's procfs: a hung daemon (pid 4242) serving ublkb0 to ublkb7,
// each /dev/ublkcN open in it, and 2000 other processes, each read in
// 1 ms of virtual time by the pass that tells whose each device is (on a
// loaded QEMU guest, 55 processes took the pass 0.9 s). The step has
// sandboxd's kind of reserve, 1 s, in a 2 s window, on a vulnerable
// kernel with the control device.
//
//	0 s    the pass: the daemon's fds read first, every device open in
//	       it is its own (the driver lets one process open a
//	       /dev/ublkcN): all 8 told at once, no process walked
//	~1 s   the last resort stops each (STOP_DEV), the daemon is asked to
//	       stop and, hung, killed with no device live
//
// Before, the pass walked every process for every device before it told
// any, was cut at the kill floor with all 8 untold, the control stopped
// none of them, and the step ended left_live with the hung daemon
// running, for the pod's SIGKILL to kill with 8 devices live.
//
// With a ninth device, ublkb8, served by another pod's server (pid 77),
// the daemon's 8 are told as at once; ublkb8, which only the walk can
// tell, is not told in the stage's time and stays live, the control's
// never (the rule stands: a device not known to be the daemon's is left
// alone).
func TestWhosePassTellsTheDaemonsOwnDevicesFirstAndOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		realpart.Missing(t, "needs root to make the char device nodes the daemon holds")
	}
	for name, other := range map[string]bool{"the daemon's 8": false, "and another server's ublkb8": true} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, ids := manyServed(t, 8, other)
				d := newMemDaemon(f.tree, ids...)
				d.hung = true
				t.Cleanup(d.close)
				ctl := &memControl{tree: f.tree, d: d}
				daemon := DaemonFuncs{StopFunc: d.RequestStop, WaitFunc: d.Wait, KillFunc: d.Kill, PidFunc: func() int { return 4242 }}
				td, err := New(daemon, f.config(vulnerable, ctl, Config{Reserve: time.Second, RequestTimeout: 100 * time.Millisecond, ExitWait: 100 * time.Millisecond}))
				require.NoError(t, err)
				walked := 0
				td.cfg.beforeCharRead = func(string) { walked++; time.Sleep(time.Millisecond) }
				rep, took, err := runFor(t, td, 2*time.Second)
				t.Logf("took %v, %d process(es) walked\n%s", took, walked, rep.String())
				events := d.Events()
				for _, id := range ids[:8] {
					assert.Nil(t, stepOf(rep.Device(id), "whose"), "ublkb%d, open in the daemon, not told its own", id)
					assert.Contains(t, events, "STOP_DEV "+strconv.Itoa(id))
					assert.False(t, f.tree.HasDisk(id), "ublkb%d stopped", id)
				}
				if !other {
					require.NoError(t, err)
					assert.Equal(t, 0, walked, "every device told by the daemon's own fds: no process walked")
					assert.Contains(t, events, "kill", "the hung daemon killed with no device live")
					assert.NotEqual(t, VerdictLeftLive, rep.Verdict)
					return
				}
				assert.Error(t, err, "ublkb8, not known whose, left live")
				assert.NotContains(t, events, "STOP_DEV 8", "not known to be the daemon's: never the control's")
				assert.True(t, f.tree.HasDisk(8))
			})
		})
	}
}

// manyServed makes a fake node for TestWhosePassTellsTheDaemonsOwnDevicesFirstAndOnce:
// n live devices, each /dev/ublkcN a real node open in the daemon (pid
// 4242, the server's pod), with other a device n served by pid 77 in
// another pod, and 2000 processes holding none. It returns the fixture and
// the devices' IDs.
func manyServed(t *testing.T, n int, other bool) (*fixture, []int) {
	t.Helper()
	f := newFixture(t)
	var ids []int
	for id := range n {
		var procs []fakeProc // the step's process and the daemon's, made with the first device
		if id == 0 {
			procs = stepAndDaemon
		}
		_, node := makeServed(t, f, servedChar{id: id, charMajor: 4086, salt: 64 + id, inSysfs: true, procs: procs})
		require.NoError(t, os.Symlink(node, filepath.Join(f.proc, "4242", "fd", strconv.Itoa(3+id))))
		ids = append(ids, id)
	}
	if other {
		makeServed(t, f, servedChar{id: n, charMajor: 4086, salt: 64 + n, inSysfs: true, procs: []fakeProc{{"77", "podB", true}}})
		ids = append(ids, n)
	}
	for pid := 1000; pid < 3000; pid++ {
		fakeProcess(t, f.proc, strconv.Itoa(pid), "0::/kubepods/podC/ctr\n", "")
	}
	return f, ids
}
