//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeublk"
)

// Fault (docs/faults.md row 2641): the server exits 0 on its own before
// any termination, and the daemon's teardown that follows fails: the device
// daemon ignores its stop and, on a kernel not known fixed, is never killed
// with its device live (the device the host may crash on). In a drain, the
// step posts StepFailed with the teardown's account; here no drain ran, and
// the supervisor's Event for the exit said nothing of the devices, and with
// no sandbox lost it posted none at all: `kubectl describe pod` showed no
// failed teardown. Now the daemon step that failed posts StepFailed, a
// Warning, as in a drain, and the exit's Event (SandboxesLost) has the
// teardown's line. The real supervisor, its pod on a fake API server:
//
//	0 s    the server exits 0 on its own (nothing listed, or 2 running)
//	       the daemon is asked to stop: it ignores it; its device stays live
//	2.5 s  the step times out (-grace 4s), the daemon left running
//	before: no Event (nothing lost), or SandboxesLost alone, no ublk line
//	after:  StepFailed "step daemon: timed_out …" with "ublk teardown:
//	        left_live"; SandboxesLost with "ublk teardown: left_live, 1 device"
func TestAFailedTeardownAfterTheServerExitedOnItsOwnIsAnEvent(t *testing.T) {
	for name, lost := range map[string]bool{"no sandbox lost": false, "2 sandboxes lost": true} {
		t.Run(name, func(t *testing.T) {
			served, env := podAPI(t)
			api := served.Pod()
			dir := t.TempDir()
			report, events := filepath.Join(dir, "report.json"), filepath.Join(dir, "daemon.log")
			cfg := fakeublk.DaemonConfig{
				SysRoot:  filepath.Join(dir, "sys"),
				Devices:  []fakeublk.DeviceSpec{{ID: 0, Major: 4000, Minor: 0}},
				EventLog: events,
				Mode:     fakeublk.Hung, // ignores SIGTERM
			}
			b, err := json.Marshal(cfg)
			require.NoError(t, err)
			listen, server := freeAddr(t), freeAddr(t)
			stub := []string{"-listen", server, "-die-when", filepath.Join(dir, "die"), "-exit", "0"}
			if lost {
				stub = append(stub, "-list", "running")
			}
			sup := startSupervisor(t,
				[]string{"-listen", listen, "-server-url", "http://" + server, "-grace", "4s", "-report", report,
					"-ublk-kernel", "vulnerable=*", "-daemon", strings.Join(helperCommand("daemon", string(b)), " ")},
				helperCommand("stubserver", stub...),
				append(env, "POD_NAME=agentenv-node-x7k2p", EnvSysfsRoot+"="+cfg.SysRoot, EnvProcfsRoot+"="+emptyProcfs(cfg.SysRoot))...)
			daemonStarted(t, events)
			require.Eventually(t, func() bool { return get(t.Context(), "http://"+listen+"/readyz") == 200 }, 10*time.Second, 20*time.Millisecond,
				"readyz 200: the supervisor listed the server's sandboxes")
			require.NoError(t, os.WriteFile(filepath.Join(dir, "die"), nil, 0o644))

			killHeldDaemon(t, report)
			assert.Equal(t, 1, sup.exitCode(t, 15*time.Second))
			notes := map[string]string{}
			for _, ev := range api.Events() {
				notes[ev.Reason] = ev.Type + ": " + ev.Note
			}
			failed, ok := notes["StepFailed"]
			require.True(t, ok, "a StepFailed Event: %v", api.Reasons())
			assert.True(t, strings.HasPrefix(failed, "Warning: step daemon: timed_out in "), failed)
			assert.Contains(t, failed, "ublk: 1 device(s) still live")
			assert.Contains(t, failed, "\nublk teardown: left_live (kernel ", "the teardown's account, as a drain's step posts it")
			assert.Contains(t, failed, "ublkb0: live -> live")
			if !lost {
				assert.NotContains(t, notes, "SandboxesLost")
				return
			}
			assert.Contains(t, notes["SandboxesLost"], "Warning: the server exited on its own before termination (exited 0), no drain ran: 2 sandboxes lost with it")
			assert.Contains(t, notes["SandboxesLost"], "\nublk teardown: left_live, 1 device\n", "the exit's Event has the teardown's line")
		})
	}
}
