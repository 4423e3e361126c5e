//go:build linux

package main

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault: a supervisor that could not start (a server command that does not
// exist, a daemon that does not, a -listen another process holds, a -grace
// the drain's plan does not fit in) exited 1 (2 for the last) and wrote no
// termination message, where sandboxd and gvisor-worker write one (row
// 913): the pod's last state said exit code 1 and nothing else, the
// kubelet's default terminationMessagePolicy (File) not falling back to the
// log, and a mistyped server path in a manifest showed as a crash loop
// with no reason. It now writes "drainkit: no drain ran" and why, on one
// line. Real processes, -termination-log given.
func TestStartThatFailsSaysWhyInTheTerminationMessage(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer held.Close()
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name   string
		flags  []string
		server []string
		code   int
		why    []string // what the reason names
	}{
		{"server", nil, []string{missing + "/sandbox-server"}, 1, []string{"starting children: server: ", missing}},
		{"daemon", []string{"-daemon", missing + "/ublkd --socket x"}, helperCommand("stubserver"), 1, []string{"starting children: daemon: ", missing}},
		{"listen", []string{"-listen", held.Addr().String()}, helperCommand("stubserver"), 1, []string{"-listen: ", "address already in use"}},
		{"grace", []string{"-grace", "1s", "-daemon", "true"}, helperCommand("stubserver"), 2, []string{"-grace 1s too short"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			termLog := filepath.Join(t.TempDir(), "termination-log")
			flags := append([]string{"-listen", freeAddr(t), "-termination-log", termLog}, tc.flags...)
			sup := startSupervisor(t, flags, tc.server)
			assert.Equal(t, tc.code, sup.exitCode(t, 20*time.Second))
			msg := readFile(t, termLog)
			lines := strings.Split(strings.TrimSuffix(msg, "\n"), "\n")
			require.Len(t, lines, 2, msg)
			assert.Equal(t, "drainkit: no drain ran", lines[0])
			assert.True(t, strings.HasPrefix(lines[1], "supervisor: could not start: "), lines[1])
			for _, why := range tc.why {
				assert.Contains(t, lines[1], why)
			}
		})
	}
}
