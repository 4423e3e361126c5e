package ublkctl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// DefaultPath is the ublk control device.
const DefaultPath = "/dev/ublk-control"

// MaxDevices is the ublk driver's UBLK_MAX_UBLKS (UBLK_MINORS, 1<<20):
// every device ID is below it, and ADD_DEV refuses one that is not. The
// commands refuse an ID outside [0, MaxDevices) without sending it: the
// command's dev_id has 32 bits, so 1<<32 would reach device 0.
const MaxDevices = 1 << 20

// ublk control commands (include/uapi/linux/ublk_cmd.h), ioctl-encoded
// with type 'u' and a 32-byte struct ublksrv_ctrl_cmd.
const (
	cmdGetDevInfo        uint32 = 0x80207502
	cmdAddDev            uint32 = 0xc0207504
	cmdDelDev            uint32 = 0xc0207505
	cmdStartDev          uint32 = 0xc0207506
	cmdStopDev           uint32 = 0xc0207507
	cmdStartUserRecovery uint32 = 0xc0207510
	cmdEndUserRecovery   uint32 = 0xc0207511
	cmdGetDevInfo2       uint32 = 0x80207512
	cmdGetFeatures       uint32 = 0x80207513 // 6.5
	cmdDelDevAsync       uint32 = 0x80207514 // 6.9
	cmdUpdateSize        uint32 = 0xc0207515 // 6.16
	cmdQuiesceDev        uint32 = 0xc0207516 // 6.16
	cmdTryStopDev        uint32 = 0xc0207517 // 7.0
)

// plainOp is a command's plain number (UBLK_CMD_*, the ioctl number's
// nr byte), all kernels before 6.4 take, and 6.4 on unless built without
// CONFIG_BLKDEV_UBLK_LEGACY_OPCODES.
func plainOp(op uint32) uint32 { return op & 0xff }

// Device feature flags (ublksrv_ctrl_dev_info.flags).
const (
	FlagUserRecovery        uint64 = 1 << 3
	flagUserRecoveryReissue uint64 = 1 << 4
	flagUnprivilegedDev     uint64 = 1 << 5
	flagUserRecoveryFailIO  uint64 = 1 << 9
	flagQuiesce             uint64 = 1 << 12
	flagSafeStopDev         uint64 = 1 << 17
)

// DevState is a ublk device's state as the driver reports it.
type DevState uint16

// Device states (UBLK_S_DEV_*).
const (
	// StateDead: stopped (or never started); no block I/O in flight.
	StateDead DevState = 0
	// StateLive: the disk exists and its queues serve I/O.
	StateLive DevState = 1
	// StateQuiesced: the server is gone and recovery is pending.
	StateQuiesced DevState = 2
	// StateFailIO: the server is gone and I/O fails at once.
	StateFailIO DevState = 3
)

// String returns "dead", "live", "quiesced", "fail_io" or "state(N)".
func (s DevState) String() string {
	switch s {
	case StateDead:
		return "dead"
	case StateLive:
		return "live"
	case StateQuiesced:
		return "quiesced"
	case StateFailIO:
		return "fail_io"
	}
	return fmt.Sprintf("state(%d)", uint16(s))
}

// MarshalText makes DevState readable in JSON reports.
func (s DevState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// DevInfo is struct ublksrv_ctrl_dev_info (64 bytes), as GET_DEV_INFO
// returns it.
type DevInfo struct {
	NrHWQueues    uint16   `json:"nr_hw_queues"`
	QueueDepth    uint16   `json:"queue_depth"`
	State         DevState `json:"state"`
	MaxIOBufBytes uint32   `json:"max_io_buf_bytes"`
	DevID         uint32   `json:"dev_id"`
	ServerPID     int32    `json:"ublksrv_pid"`
	Flags         uint64   `json:"flags"`
	ServerFlags   uint64   `json:"ublksrv_flags"`
	OwnerUID      uint32   `json:"owner_uid"`
	OwnerGID      uint32   `json:"owner_gid"`
}

// devInfoSize is sizeof(struct ublksrv_ctrl_dev_info).
const devInfoSize = 64

// ctrlCmdSize is sizeof(struct ublksrv_ctrl_cmd).
const ctrlCmdSize = 32

// encodeCtrlCmd lays out struct ublksrv_ctrl_cmd: dev_id u32 @0,
// queue_id u16 @4 (0xffff: none), len u16 @6, addr u64 @8, data[0] u64
// @16, dev_path_len u16 @24, pad u16 @26, reserved u32 @28.
func encodeCtrlCmd(devID uint32, addr uint64, length uint16, data uint64, devPathLen uint16) []byte {
	b := make([]byte, ctrlCmdSize)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], devID)
	ne.PutUint16(b[4:], 0xffff)
	ne.PutUint16(b[6:], length)
	ne.PutUint64(b[8:], addr)
	ne.PutUint64(b[16:], data)
	ne.PutUint16(b[24:], devPathLen)
	return b
}

func decodeDevInfo(b []byte) DevInfo {
	ne := binary.NativeEndian
	return DevInfo{
		NrHWQueues:    ne.Uint16(b[0:]),
		QueueDepth:    ne.Uint16(b[2:]),
		State:         DevState(ne.Uint16(b[4:])),
		MaxIOBufBytes: ne.Uint32(b[8:]),
		DevID:         ne.Uint32(b[12:]),
		ServerPID:     int32(ne.Uint32(b[16:])),
		Flags:         ne.Uint64(b[24:]),
		ServerFlags:   ne.Uint64(b[32:]),
		OwnerUID:      ne.Uint32(b[40:]),
		OwnerGID:      ne.Uint32(b[44:]),
	}
}

// Controller sends ublk control commands. *Control implements it over
// /dev/ublk-control; tests supply their own (see internal/ublkhook).
type Controller interface {
	// DevInfo returns GET_DEV_INFO for device id; for a device that does
	// not exist, an error wrapping ENODEV (EINVAL from 6.0 and 6.1 to
	// 6.1.42 reads so).
	DevInfo(ctx context.Context, id int) (DevInfo, error)
	// StopDev sends STOP_DEV: the kernel removes the disk and waits for
	// the in-flight requests (which only live queues can complete), then
	// aborts the queues' idle fetches. A device that does not exist
	// (ENODEV; EINVAL from 6.0 and 6.1 to 6.1.42) is not an error.
	StopDev(ctx context.Context, id int) error
	// DelDev sends DEL_DEV, which waits until the daemon has closed
	// /dev/ublkcN. A device that does not exist (ENODEV) is not an error;
	// EINTR is retried.
	DelDev(ctx context.Context, id int) error
	// Close releases the controller.
	Close() error
}

// ErrNoControl is wrapped by Open's error when the control device
// does not exist: the ublk_drv module is not loaded (or not built).
var ErrNoControl = errors.New("ublk: no ublk control device (is the ublk_drv module loaded? try modprobe ublk_drv)")
