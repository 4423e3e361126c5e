package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault: the plan of the kubelet's own termination moved the budget's
// SIGKILL to T0 + the kubelet's grace and laid the work out to the
// deadline that SIGKILL gives, as the drain did before row 2701. But a
// graceful node shutdown ends the node at the slice's end, and SIGTERM's
// 2 s floor for SIGKILL does not move that end: the server's drain keeps
// its margin before the node's end (drain.Config.KubeletGrace, at most
// half of it), so a slice under 2 s leaves less than the plan counted.
//
//	slice 1 s, no preStop wait, one pause of 800 ms:
//	T0 = SIGTERM     node down at T0 + 1 s; SIGKILL's floor T0 + 2 s
//	the plan laid out to T0 + 1 s (2 s less a margin of 1 s): FITS
//	the drain's deadline T0 + 0.5 s (the node's end less half of the
//	slice): the pause does not fit
//
// The plan now lays the node's termination out with the budget the
// drain makes, its end told, and names the smallest slice that holds the
// work by the same arithmetic (2 s here, where it named the deletion's
// 1 s).
func TestNodeShutdownUnderTwoSecondsKeepsTheMarginBeforeTheNodesEnd(t *testing.T) {
	plan := func(slice string) (int, string) {
		t.Helper()
		code, out, errw := drainkit(t, "plan", "-count", "1", "-estimate", "800ms", "-concurrency", "1",
			"-grace", "30", "-kubelet-grace", slice)
		require.Empty(t, errw)
		assert.Regexp(t, `verdict\s+FITS`, out, "the deletion's 30 s hold the pause")
		return code, out
	}
	code, out := plan("1")
	assert.Equal(t, exitNoFit, code, out)
	assert.Regexp(t, `node shutdown\s+DOES NOT FIT\s+in the kubelet's own grace, 1s \(-kubelet-grace\): about 1 of 1 sandbox would not be preserved; it needs 2s`, out)

	code, out = plan("1.5s")
	assert.Equal(t, exitNoFit, code, out, "0.75 s before the node's end at 1.5 s")
	assert.Contains(t, out, "it needs 2s")

	code, out = plan("2")
	assert.Equal(t, exitOK, code, out, "1 s: the node's end at 2 s less its margin, 1 s")
	assert.Regexp(t, `node shutdown\s+FITS\s+in the kubelet's own grace, 2s`, out)
}
