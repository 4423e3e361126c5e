package main

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests delete a probe's pod once it has recorded "ready", and the kubelet then calls
// its preStop GET /hook: "ready" is recorded only once the hook's address accepts
// connections. The probe recorded it first and listened after, in a goroutine; one whose
// address cannot be listened on recorded "ready" all the same, then died. It now records
// nothing and exits 1.
func TestProbeIsReadyOnlyOnceItListens(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	events := filepath.Join(t.TempDir(), "events")
	assert.Equal(t, 1, probe([]string{"-listen", taken.Addr().String(), "-events", events}))
	data, err := os.ReadFile(events)
	require.NoError(t, err)
	assert.NotContains(t, string(data), "ready", "ready recorded with nothing listening")
}
