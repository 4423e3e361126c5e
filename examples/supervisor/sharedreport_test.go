//go:build linux

package main

import (
	"context"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault: two supervisors given one -report (two containers of a pod mounting
// one volume, a copied manifest): both started, both drained at the pod's
// deletion, and each wrote its account over the other's, the last rename
// winning, in silence: one server's sandboxes had no Report. A supervisor
// now holds its -report's lock (flock on FILE.lock beside it) from its start
// to its exit, and the second one's start fails, naming the first, exit 2:
// the command line is what to fix. Real processes:
//
//	A starts with -report R; its /healthz answers
//	B starts with -report R: before, it ran on, ready to drain over A's
//	                         account; now it exits 2 naming A's pid
//	A drains on SIGTERM and exits 0, its Report at R; C starts with R: ready
func TestTwoSupervisorsGivenOneReportFailTheSecondAtStart(t *testing.T) {
	a := startStubNode(t, "20s")
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+a.listen+"/healthz") == 200 }, 10*time.Second, 20*time.Millisecond)

	termLog := filepath.Join(t.TempDir(), "termination-log")
	api := freeAddr(t)
	b := startSupervisor(t, []string{"-listen", freeAddr(t), "-server-url", "http://" + api, "-grace", "20s", "-report", a.report, "-termination-log", termLog},
		helperCommand("stubserver", "-listen", api))
	assert.Equal(t, 2, b.exitCode(t, 10*time.Second), "bad usage: the command line is what to fix")
	msg := readFile(t, termLog)
	assert.Contains(t, msg, "drainkit: no drain ran")
	assert.Contains(t, msg, "-report "+a.report+": another supervisor writes its Report there, pid "+strconv.Itoa(a.sup.pid()))

	a.sup.signal(t, syscall.SIGTERM)
	require.Equal(t, 0, a.sup.exitCode(t, 20*time.Second))
	assert.NotNil(t, readReport(t, a.report).Drain, "A's account")

	listen := freeAddr(t)
	api = freeAddr(t)
	c := startSupervisor(t, []string{"-listen", listen, "-server-url", "http://" + api, "-grace", "20s", "-report", a.report},
		helperCommand("stubserver", "-listen", api))
	ready, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.Eventually(t, func() bool { return get(ready, "http://"+listen+"/healthz") == 200 }, 10*time.Second, 20*time.Millisecond,
		"A's lock went with its exit")
	c.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, c.exitCode(t, 20*time.Second))
}
