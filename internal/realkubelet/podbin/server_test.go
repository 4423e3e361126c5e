package main

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/drain"
)

// Fault (row 1270): a server whose address could not be listened on (Server.Run returned 2:
// nothing served, nothing drained) called Drainer().Shutdown for the Report Run had, which
// after 2 starts a drain (drain.Server.Run's doc): its sandboxes were preserved, none of
// them ever served, and a Report of that drain written to -report, as if the manifest had
// run. It now writes no Report and exits 2, with Run's own log saying why.
func TestServerThatCouldNotListenWritesNoReport(t *testing.T) {
	t.Setenv(drain.EnvGrace, "30")
	t.Setenv(drain.EnvHookListen, "127.0.0.1:0")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	report := filepath.Join(t.TempDir(), "report.json")
	assert.Equal(t, 2, server([]string{"-listen", taken.Addr().String(), "-sandboxes", "2", "-pause", "1ms", "-report", report}))
	_, err = os.Stat(report)
	assert.ErrorIs(t, err, os.ErrNotExist, "a Report written by a server that never served")
}
