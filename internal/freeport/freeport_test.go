package freeport

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The port is below the ephemeral range, where no connection's local port
// and no listener on port 0 can land, and free: the caller can bind it.
func TestAddrIsBelowTheEphemeralRangeAndBindable(t *testing.T) {
	low := ephemeralLow()
	for range 20 {
		addr, err := Addr()
		require.NoError(t, err)
		host, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1", host)
		p, err := strconv.Atoi(port)
		require.NoError(t, err)
		assert.True(t, p >= lowest && p < low, "port %d outside [%d, %d)", p, lowest, low)
		ln, err := net.Listen("tcp", addr)
		require.NoError(t, err, "the port is free")
		require.NoError(t, ln.Close())
	}
}

// The range is read from the kernel's file; a range that leaves no room
// below it is an error that says so.
func TestEphemeralRangeIsReadAndARangeWithNoRoomIsAnError(t *testing.T) {
	old := rangeFile
	t.Cleanup(func() { rangeFile = old })
	rangeFile = filepath.Join(t.TempDir(), "range")

	require.NoError(t, os.WriteFile(rangeFile, []byte("40000\t60999\n"), 0o600))
	assert.Equal(t, 40000, ephemeralLow())

	require.NoError(t, os.WriteFile(rangeFile, []byte("1024\t65535\n"), 0o600))
	_, err := Addr()
	assert.EqualError(t, err, "freeport: the ephemeral range starts at 1024, no room below it above 10000")

	require.NoError(t, os.Remove(rangeFile))
	assert.Equal(t, 32768, ephemeralLow(), "Linux's default when the file cannot be read")
}

// Addr never returns a port it returned before in this process, even where
// the range holds few: ten calls over ten ports are ten ports, and the
// eleventh finds none. Picked at random each time, two of ten calls shared
// a port but in 0.04 % of runs.
func TestAddrNeverHandsOutAPortTwice(t *testing.T) {
	old := rangeFile
	t.Cleanup(func() { rangeFile = old })
	rangeFile = filepath.Join(t.TempDir(), "range")
	require.NoError(t, os.WriteFile(rangeFile, []byte(strconv.Itoa(lowest+10)+"\t60999\n"), 0o600))
	mu.Lock()
	saved := handed
	handed = map[int]bool{}
	mu.Unlock()
	t.Cleanup(func() { mu.Lock(); handed = saved; mu.Unlock() })

	seen := map[string]bool{}
	for range 10 {
		addr, err := Addr()
		if err != nil {
			continue // a port of the ten another process holds
		}
		assert.False(t, seen[addr], "%s handed out twice", addr)
		seen[addr] = true
	}
	assert.GreaterOrEqual(t, len(seen), 8, "ten ports, few of them busy")
	_, err := Addr()
	assert.ErrorContains(t, err, "no free port below", "every port of the range handed out or busy")
}
