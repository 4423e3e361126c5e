//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/internal/startsig/startsigtest"
)

// envHoldAfterMain, in the supervisor helper's environment, names a FIFO it
// writes "exit N" to (N, Main's status) once Main has returned, before it
// exits: a test holds it there, between Main's end and the exit, and signals
// it. It says it is there in FIFO.held first.
const envHoldAfterMain = "SUPERVISOR_TEST_HOLD_AFTER_MAIN"

// holdAfterMain holds the supervisor helper on the FIFO envHoldAfterMain
// names, if any, until a reader takes what it writes.
func holdAfterMain(code int) {
	fifo := os.Getenv(envHoldAfterMain)
	if fifo == "" {
		return
	}
	if err := os.WriteFile(fifo+".held", nil, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "holdAfterMain:", err)
		return
	}
	if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
		fmt.Fprintf(f, "exit %d\n", code)
		f.Close()
	}
}

// Fault (row 1117): the supervisor stopped catching its signals when Main
// returned (its caught's Close, deferred, last), before the process exits,
// and a SIGTERM between the two (the kubelet's again: a restarted kubelet, a
// runtime that sends the stop signal with every stop request) had its
// default action: status 143 for a drain that went well, a
// pod's last state that says Error. The test holds the supervisor there,
// between Main's return and its exit, on a FIFO nobody reads until the
// SIGTERM has come:
//
//	SIGTERM:  the drain of a stub server; the Report written; Main returns 0
//	held:     Main's status written to the FIFO: waits for a reader
//	kubelet:  SIGTERM again    before: the supervisor ends by it (143)
//	test:     reads the FIFO   after: "exit 0", exit status 0
//
// Real processes: this test binary, re-executed as the supervisor and its server.
func TestSIGTERMAfterMainReturnedDoesNotEndTheSupervisor(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "exit")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	report, listen, api := filepath.Join(dir, "report.json"), freeAddr(t), freeAddr(t)
	var stderr logbuf.Buffer
	sup := startSupervisorLogging(t, &stderr,
		[]string{"-listen", listen, "-server-url", "http://" + api, "-grace", "5s", "-report", report,
			"-termination-log", filepath.Join(dir, "termination-log")},
		helperCommand("stubserver", "-listen", api, "-exit", "0"), envHoldAfterMain+"="+fifo)
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/healthz") == 200 }, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return get(ctx, "http://"+api+"/healthz") != 0 }, 10*time.Second, 20*time.Millisecond)
	sup.signal(t, syscall.SIGTERM)
	require.Eventually(t, func() bool {
		_, err := os.Stat(fifo + ".held")
		return err == nil
	}, 20*time.Second, time.Millisecond, "Main did not return: %s", &stderr)

	data := startsigtest.SIGTERMAtFIFO(t, sup.cmd.Process, fifo, sup.done, &stderr)
	status := sup.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.False(t, status.Signaled(), "the supervisor ended by the SIGTERM again, after a drain that went well\n%s", &stderr)
	assert.Equal(t, 0, status.ExitStatus(), "%s", &stderr)
	assert.Equal(t, "exit 0\n", string(data))
	assert.Equal(t, 0, readReport(t, report).ExitCode)
}
