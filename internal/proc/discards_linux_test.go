//go:build linux

package proc

import (
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// status is a /proc/PID/status of a process whose innermost PID is nspid, with the masks
// of the signals it blocks and catches and its tracer's PID.
func status(nspid, blocked, caught, tracer string) string {
	return "Name:\tsleep\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\nPPid:\t1\nTracerPid:\t" + tracer +
		"\nNSpid:\t4242\t" + nspid + "\nSigQ:\t0/63483\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000000000\nSigBlk:\t" + blocked +
		"\nSigIgn:\t0000000000000000\nSigCgt:\t" + caught + "\n"
}

// The kernel discards a signal to a namespace's init only when it has no handler for it,
// does not block it and is not traced; never SIGKILL, SIGSTOP or SIGCONT, which an
// ancestor's kill forces or which continues the process all the same.
func TestDiscardsOnlyWhatANamespaceInitCannotGet(t *testing.T) {
	const none, term = "0000000000000000", "0000000000004000" // SIGTERM is bit 15
	for _, c := range []struct {
		name   string
		status string
		sig    syscall.Signal
		want   bool
	}{
		{"init with no handler", status("1", none, none, "0"), syscall.SIGTERM, true},
		{"init catching it", status("1", none, term, "0"), syscall.SIGTERM, false},
		{"init blocking it", status("1", term, none, "0"), syscall.SIGTERM, false},
		{"traced init", status("1", none, none, "77"), syscall.SIGTERM, false},
		{"not an init", status("12", none, none, "0"), syscall.SIGTERM, false},
		{"init catching another signal", status("1", none, "0000000000000002", "0"), syscall.SIGTERM, true},
	} {
		got, err := discards(c.status, c.sig)
		require.NoError(t, err, c.name)
		assert.Equal(t, c.want, got, c.name)
	}
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGCONT} {
		p := &Process{pid: 1}
		got, err := p.Discards(sig)
		require.NoError(t, err)
		assert.False(t, got, sig.String())
	}
}

// A process waiting in rt_sigtimedwait (sigwait: tini's, dumb-init's way) has the signals it
// waits for out of its blocked mask in its status, and blocked for the kernel: it is seen by
// the system call /proc/PID/syscall names, a 32-bit system's time64 one included.
func TestSigwaitIsSeenInTheSystemCall(t *testing.T) {
	for file, want := range map[string]bool{
		strconv.Itoa(syscall.SYS_RT_SIGTIMEDWAIT) + " 0x7ffd5a1c 0x0 0x0 0x8 0x0 0x0 0x7ffd5a00 0x4a5f3e\n": true,
		"421 0xbfd5a1c 0x0 0x0 0x8 0x0 0x0 0xbfd5a00 0x804a5f3\n":                                           true,
		strconv.Itoa(syscall.SYS_WAIT4) + " 0xffffffffffffffff 0x0 0x0 0x0 0x0 0x0 0x7ffd5a00 0x4a5f3e\n":   false,
		"running\n":                false,
		"-1 0x7ffd5a00 0x4a5f3e\n": false,
		"":                         false,
	} {
		assert.Equal(t, want, waitsForSignals(file), "%q", file)
	}
}
