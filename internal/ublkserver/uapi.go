package ublkserver

import "encoding/binary"

// The ublk UAPI as this server uses it (include/uapi/linux/ublk_cmd.h).
// Commands use the ioctl encoding ('u', number, payload size), which every
// kernel with ublk accepts.

// ioc builds an ioctl-style command number: dir<<30 | size<<16 | 'u'<<8 | nr.
func ioc(dir, nr, size uint32) uint32 { return dir<<30 | size<<16 | 'u'<<8 | nr }

const (
	iocRead      = 2
	iocReadWrite = 3

	ctrlCmdSize = 32 // struct ublksrv_ctrl_cmd
	ioCmdSize   = 16 // struct ublksrv_io_cmd
)

// Control commands, sent to /dev/ublk-control.
var (
	cmdGetDevInfo = ioc(iocRead, 0x02, ctrlCmdSize)
	cmdAddDev     = ioc(iocReadWrite, 0x04, ctrlCmdSize)
	cmdDelDev     = ioc(iocReadWrite, 0x05, ctrlCmdSize)
	cmdStartDev   = ioc(iocReadWrite, 0x06, ctrlCmdSize)
	cmdStopDev    = ioc(iocReadWrite, 0x07, ctrlCmdSize)
	cmdSetParams  = ioc(iocReadWrite, 0x08, ctrlCmdSize)
)

// I/O commands, sent to /dev/ublkcN by the queue's own thread.
var (
	ioFetchReq       = ioc(iocReadWrite, 0x20, ioCmdSize)
	ioCommitAndFetch = ioc(iocReadWrite, 0x21, ioCmdSize)
)

// Results of an I/O command's completion.
const (
	ioResOK    = 0
	ioResAbort = -19 // -ENODEV: the device is stopping; do not fetch again
)

// Operations in struct ublksrv_io_desc.op_flags (low 8 bits).
const (
	opRead  = 0
	opWrite = 1
	opFlush = 2
)

// Device states in struct ublksrv_ctrl_dev_info.state.
const (
	stateDead = 0
	stateLive = 1
)

const (
	paramTypeBasic   = 1 << 0
	flagCmdIoctl     = 1 << 6 // UBLK_F_CMD_IOCTL_ENCODE
	flagUnprivDev    = 1 << 5 // UBLK_F_UNPRIVILEGED_DEV
	flagUserRecovery = 1 << 3 // UBLK_F_USER_RECOVERY
	anyQueue         = 0xffff // queue_id of a command that is not for one queue
	autoDevID        = 0xffffffff

	devInfoSize   = 64 // struct ublksrv_ctrl_dev_info
	basicParamsN  = 40 // ublk_params header (8) + struct ublk_param_basic (32)
	ioDescSize    = 24 // struct ublksrv_io_desc
	maxQueueDepth = 4096
	// cmdBufStride is the mmap offset distance between queues' descriptor
	// arrays: room for the deepest queue, rounded up to a page.
	cmdBufStride = (maxQueueDepth*ioDescSize + 4095) &^ 4095
)

var ne = binary.NativeEndian

// ctrlCmd encodes struct ublksrv_ctrl_cmd: dev_id @0, queue_id @4, len @6,
// addr @8, data[0] @16, dev_path_len @24.
func ctrlCmd(devID uint32, addr uint64, length uint16, data0 uint64, devPathLen uint16) []byte {
	b := make([]byte, ctrlCmdSize)
	ne.PutUint32(b[0:], devID)
	ne.PutUint16(b[4:], anyQueue)
	ne.PutUint16(b[6:], length)
	ne.PutUint64(b[8:], addr)
	ne.PutUint64(b[16:], data0)
	ne.PutUint16(b[24:], devPathLen)
	return b
}

// devInfo is struct ublksrv_ctrl_dev_info, the fields this server uses.
type devInfo struct {
	NrHWQueues    uint16
	QueueDepth    uint16
	State         uint16
	MaxIOBufBytes uint32
	DevID         uint32
	ServerPID     int32
	Flags         uint64
}

func (d devInfo) encode(b []byte) {
	clear(b[:devInfoSize])
	ne.PutUint16(b[0:], d.NrHWQueues)
	ne.PutUint16(b[2:], d.QueueDepth)
	ne.PutUint16(b[4:], d.State)
	ne.PutUint32(b[8:], d.MaxIOBufBytes)
	ne.PutUint32(b[12:], d.DevID)
	ne.PutUint32(b[16:], uint32(d.ServerPID))
	ne.PutUint64(b[24:], d.Flags)
}

func decodeDevInfo(b []byte) devInfo {
	return devInfo{
		NrHWQueues:    ne.Uint16(b[0:]),
		QueueDepth:    ne.Uint16(b[2:]),
		State:         ne.Uint16(b[4:]),
		MaxIOBufBytes: ne.Uint32(b[8:]),
		DevID:         ne.Uint32(b[12:]),
		ServerPID:     int32(ne.Uint32(b[16:])),
		Flags:         ne.Uint64(b[24:]),
	}
}

// basicParams encodes struct ublk_params with only the basic part: a disk
// of sectors 512-byte sectors, 4 KiB physical blocks, requests of at most
// maxSectors.
func basicParams(b []byte, sectors uint64, maxSectors uint32) {
	clear(b[:basicParamsN])
	ne.PutUint32(b[0:], basicParamsN)
	ne.PutUint32(b[4:], paramTypeBasic)
	// basic @8: attrs u32, logical_bs_shift, physical_bs_shift, io_opt_shift,
	// io_min_shift u8, max_sectors u32, chunk_sectors u32, dev_sectors u64,
	// virt_boundary_mask u64.
	b[12], b[13], b[14], b[15] = 9, 12, 12, 9
	ne.PutUint32(b[16:], maxSectors)
	ne.PutUint64(b[24:], sectors)
}

// ioCmd encodes struct ublksrv_io_cmd: q_id @0, tag @2, result @4, addr @8.
func ioCmd(qid, tag uint16, result int32, addr uint64) []byte {
	b := make([]byte, ioCmdSize)
	ne.PutUint16(b[0:], qid)
	ne.PutUint16(b[2:], tag)
	ne.PutUint32(b[4:], uint32(result))
	ne.PutUint64(b[8:], addr)
	return b
}

// ioDesc is struct ublksrv_io_desc, which the driver writes into the
// queue's mapped descriptor array before completing a fetch.
type ioDesc struct {
	Op          uint8
	Flags       uint32
	NrSectors   uint32
	StartSector uint64
}

func decodeIODesc(b []byte) ioDesc {
	opFlags := ne.Uint32(b[0:])
	return ioDesc{
		Op:          uint8(opFlags),
		Flags:       opFlags >> 8,
		NrSectors:   ne.Uint32(b[4:]),
		StartSector: ne.Uint64(b[8:]),
	}
}
