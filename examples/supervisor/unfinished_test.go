//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
	"github.com/drainkit/drainkit/internal/kubeletsim/kubeletsimtest"
	"github.com/drainkit/drainkit/internal/lastreport/lastreporttest"
)

// Fault (row 1513): the supervisor wrote its -report only at its exit, so a SIGKILL in
// the middle of its drain (the kubelet's orphan cleanup under a restarted kubelet, an
// OOM kill) left the earlier drain's Report there, read as this one's, as sandboxd's
// did (row 1510). Now -report holds this drain's account from its start, in its "drain"
// member, marked unfinished:
//
//	an earlier drain's Report at -report (note "an earlier shutdown's")
//	the supervisor in front of the AgentENV double: 8 sandboxes, pauses of 1 s, 2 at a time
//	SIGTERM: the drain; its preserve phase pauses; -report says so: SIGKILL
//	  before: -report the earlier drain's the whole drain long (4 s), then the final Report
//	  after:  this drain's account, unfinished, the preserve phase running, 8 counted
//
// Real processes: this test binary, re-executed as the supervisor and as AgentENV.
func TestSIGKILLMidDrainLeavesTheSupervisorsUnfinishedReport(t *testing.T) {
	dir := t.TempDir()
	report := filepath.Join(dir, "report.json")
	const earlier = "an earlier shutdown's"
	require.NoError(t, os.WriteFile(report, []byte(`{"exit_code": 0, "note": "`+earlier+`"}`), 0o644))
	keyFile := filepath.Join(dir, "api-key")
	require.NoError(t, os.WriteFile(keyFile, []byte("s3cret\n"), 0o600))
	api, listen := freeAddr(t), freeAddr(t)
	argv := append(helperCommand("supervisor",
		"-api", "agentenv", "-api-key-file", keyFile, "-listen", listen, "-hook-listen", freeAddr(t),
		"-server-url", "http://"+api, "-grace", "30s", "-concurrency", "2", "-report", report, "--"),
		helperCommand("agentenv", "-listen", api, "-state", filepath.Join(dir, "state"), "-sandboxes", "8",
			"-pause-base", "1s", "-pause-per-gib", "0s")...)
	cmd := helperCmd(argv)
	cmd.Env = append(cmd.Env, fakeagentenv.EnvAPIKey+"=s3cret")
	child := kubeletsimtest.Start(t, cmd)
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/readyz") == 200 }, 20*time.Second, 20*time.Millisecond,
		"supervisor ready")

	sigterm := time.Now()
	require.NoError(t, child.Signal(syscall.SIGTERM))
	var acc struct {
		Note  string
		Drain *struct {
			Start      time.Time
			Unfinished *struct {
				Phase   string
				Counted int
			}
		}
	}
	preserving := func() bool {
		data, err := os.ReadFile(report)
		if err != nil || json.Unmarshal(data, &acc) != nil {
			return false
		}
		return acc.Drain != nil && acc.Drain.Unfinished != nil && acc.Drain.Unfinished.Phase == "preserve"
	}
	assert.Eventually(t, preserving, 10*time.Second, 5*time.Millisecond, "-report says this drain preserves")
	require.NoError(t, child.Kill())
	<-child.Exited()

	data, err := os.ReadFile(report)
	require.NoError(t, err)
	acc.Note = ""
	require.NoError(t, json.Unmarshal(data, &acc), "%s", data)
	assert.NotEqual(t, earlier, acc.Note, "the earlier drain's Report, taken for this one's: %s", data)
	drain := lastreporttest.ThisDrains(t, report, "drain", sigterm)
	assert.Equal(t, "preserve", drain.Unfinished.Phase)
	assert.Equal(t, 8, drain.Unfinished.Counted)
}
