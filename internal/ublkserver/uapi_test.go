package ublkserver

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The command numbers the kernel expects (include/uapi/linux/ublk_cmd.h,
// as recorded in shared/research/ublk-teardown.md and ublksrv).
func TestCommandNumbersMatchTheUAPI(t *testing.T) {
	for name, c := range map[string]struct{ got, want uint32 }{
		"GET_DEV_INFO":        {cmdGetDevInfo, 0x80207502},
		"ADD_DEV":             {cmdAddDev, 0xc0207504},
		"DEL_DEV":             {cmdDelDev, 0xc0207505},
		"START_DEV":           {cmdStartDev, 0xc0207506},
		"STOP_DEV":            {cmdStopDev, 0xc0207507},
		"SET_PARAMS":          {cmdSetParams, 0xc0207508},
		"IO_FETCH_REQ":        {ioFetchReq, 0xc0107520},
		"IO_COMMIT_AND_FETCH": {ioCommitAndFetch, 0xc0107521},
	} {
		assert.Equal(t, c.want, c.got, name)
	}
	assert.Equal(t, 98304, cmdBufStride, "per-queue descriptor mmap stride: 4096 tags x 24 bytes, page aligned")
}

func TestEncodingsPlaceFieldsAtTheirUAPIOffsets(t *testing.T) {
	c := ctrlCmd(7, 0x1122334455667788, 64, 4242, 11)
	assert.Equal(t, []byte{7, 0, 0, 0, 0xff, 0xff, 64, 0}, c[:8], "dev_id, queue_id -1, len")
	assert.Equal(t, uint64(0x1122334455667788), ne.Uint64(c[8:]), "addr")
	assert.Equal(t, uint64(4242), ne.Uint64(c[16:]), "data[0]")
	assert.Equal(t, uint16(11), ne.Uint16(c[24:]), "dev_path_len")

	io := ioCmd(1, 5, -5, 0xabc)
	assert.Equal(t, uint16(1), ne.Uint16(io[0:]))
	assert.Equal(t, uint16(5), ne.Uint16(io[2:]))
	assert.Equal(t, int32(-5), int32(ne.Uint32(io[4:])))
	assert.Equal(t, uint64(0xabc), ne.Uint64(io[8:]))

	info := devInfo{NrHWQueues: 2, QueueDepth: 64, State: stateLive, MaxIOBufBytes: 1 << 20, DevID: 3, ServerPID: 99, Flags: flagCmdIoctl}
	b := make([]byte, devInfoSize)
	info.encode(b)
	assert.Equal(t, info, decodeDevInfo(b))
	assert.Equal(t, uint32(3), ne.Uint32(b[12:]), "dev_id at byte 12")
	assert.Equal(t, uint64(1<<6), ne.Uint64(b[24:]), "flags at byte 24")

	p := make([]byte, basicParamsN)
	basicParams(p, 8192, 256)
	assert.Equal(t, uint32(40), ne.Uint32(p[0:]), "len")
	assert.Equal(t, uint32(1), ne.Uint32(p[4:]), "types = BASIC")
	assert.Equal(t, []byte{9, 12, 12, 9}, p[12:16], "block size shifts")
	assert.Equal(t, uint32(256), ne.Uint32(p[16:]), "max_sectors")
	assert.Equal(t, uint64(8192), ne.Uint64(p[24:]), "dev_sectors")

	d := make([]byte, ioDescSize)
	ne.PutUint32(d[0:], 1|0x2000<<8)
	ne.PutUint32(d[4:], 16)
	ne.PutUint64(d[8:], 100)
	assert.Equal(t, ioDesc{Op: opWrite, Flags: 0x2000, NrSectors: 16, StartSector: 100}, decodeIODesc(d))
}

func TestConfigDefaultsAndFieldErrors(t *testing.T) {
	c, err := Config{}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, 1, c.Devices)
	assert.Equal(t, int64(32<<20), c.Size)
	assert.Equal(t, 32, c.Depth)
	for field, bad := range map[string]Config{
		"Config.Size":       {Size: 1000},
		"Config.Depth":      {Depth: 5000},
		"Config.MaxIOBytes": {MaxIOBytes: 1000},
		"Config.Devices":    {Devices: -1},
		"Config.IODelay":    {IODelay: -1},
	} {
		_, err := bad.withDefaults()
		require.Error(t, err, field)
		assert.Contains(t, err.Error(), field)
	}
}

func TestReadEventsParsesTheLogInOrder(t *testing.T) {
	path := t.TempDir() + "/events"
	require.NoError(t, os.WriteFile(path, []byte("100 started 0\n200 stopping 0\n300 deleted 0\n"), 0o600))
	ev, err := ReadEvents(path)
	require.NoError(t, err)
	require.Len(t, ev, 3)
	e, ok := First(ev, EventStopping, 0)
	require.True(t, ok)
	assert.Equal(t, int64(200), e.At.UnixNano())
	_, ok = First(ev, EventStopping, 1)
	assert.False(t, ok)
	none, err := ReadEvents(path + ".missing")
	require.NoError(t, err)
	assert.Empty(t, none)
}
