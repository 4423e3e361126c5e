package ublkctl

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
)

// ioc builds an ioctl number as the kernel's _IOC macro does.
func ioc(dir, typ, nr, size uint32) uint32 { return dir<<30 | size<<16 | typ<<8 | nr }

// The research note's values are the kernel's _IOR/_IOWR('u', nr, struct
// ublksrv_ctrl_cmd): check both against each other.
func TestCommandCodesMatchTheUAPI(t *testing.T) {
	const r, rw, u = 2, 3, 'u'
	for code, want := range map[uint32]uint32{
		cmdGetDevInfo:        0x80207502,
		cmdAddDev:            0xc0207504,
		cmdDelDev:            0xc0207505,
		cmdStartDev:          0xc0207506,
		cmdStopDev:           0xc0207507,
		cmdStartUserRecovery: 0xc0207510,
		cmdEndUserRecovery:   0xc0207511,
		cmdGetDevInfo2:       0x80207512,
		cmdGetFeatures:       0x80207513,
		cmdDelDevAsync:       0x80207514,
		cmdUpdateSize:        0xc0207515,
		cmdQuiesceDev:        0xc0207516,
		cmdTryStopDev:        0xc0207517,
	} {
		assert.Equal(t, want, code)
	}
	assert.Equal(t, cmdGetDevInfo, ioc(r, u, 0x02, ctrlCmdSize))
	assert.Equal(t, cmdStopDev, ioc(rw, u, 0x07, ctrlCmdSize))
	assert.Equal(t, cmdDelDev, ioc(rw, u, 0x05, ctrlCmdSize))
	assert.Equal(t, cmdDelDevAsync, ioc(r, u, 0x14, ctrlCmdSize))
}

func TestCtrlCmdLayout(t *testing.T) {
	b := encodeCtrlCmd(7, 0x1122334455667788, 64, 0xabcdef, 0)
	ne := binary.NativeEndian
	assert.Len(t, b, 32)
	assert.Equal(t, uint32(7), ne.Uint32(b[0:]), "dev_id @0")
	assert.Equal(t, uint16(0xffff), ne.Uint16(b[4:]), "queue_id @4: none")
	assert.Equal(t, uint16(64), ne.Uint16(b[6:]), "len @6")
	assert.Equal(t, uint64(0x1122334455667788), ne.Uint64(b[8:]), "addr @8")
	assert.Equal(t, uint64(0xabcdef), ne.Uint64(b[16:]), "data[0] @16")
	assert.Equal(t, make([]byte, 8), b[24:], "dev_path_len, pad, reserved")
	b = encodeCtrlCmd(7, 0x1122334455667788, 75, 0, 11)
	assert.Equal(t, uint16(11), ne.Uint16(b[24:]), "dev_path_len @24: the path at addr, before the command's own buffer")
}

func TestDevInfoDecode(t *testing.T) {
	b := make([]byte, devInfoSize)
	ne := binary.NativeEndian
	ne.PutUint16(b[0:], 4)           // nr_hw_queues
	ne.PutUint16(b[2:], 128)         // queue_depth
	ne.PutUint16(b[4:], 2)           // state
	ne.PutUint32(b[8:], 512<<10)     // max_io_buf_bytes
	ne.PutUint32(b[12:], 9)          // dev_id
	ne.PutUint32(b[16:], 4242)       // ublksrv_pid
	ne.PutUint64(b[24:], 1<<3|1<<17) // flags
	ne.PutUint64(b[32:], 5)          // ublksrv_flags
	ne.PutUint32(b[40:], 1000)       // owner_uid
	ne.PutUint32(b[44:], 1001)       // owner_gid
	got := decodeDevInfo(b)
	assert.Equal(t, DevInfo{NrHWQueues: 4, QueueDepth: 128, State: StateQuiesced, MaxIOBufBytes: 512 << 10,
		DevID: 9, ServerPID: 4242, Flags: FlagUserRecovery | flagSafeStopDev, ServerFlags: 5, OwnerUID: 1000, OwnerGID: 1001}, got)
	assert.Equal(t, "quiesced", got.State.String())
	assert.Equal(t, "state(9)", DevState(9).String())
}
