//go:build linux

package ublkctl

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// fakeKernel answers control commands as the ublk driver of one kernel
// does (drivers/block/ublk_drv.c, ublk_ctrl_uring_cmd): it knows the
// plain numbers, the ioctl-encoded ones, or both, and has one device.
type fakeKernel struct {
	plain, encoded bool // the numbers it takes
	// unknown is its answer to a number it does not take: ENODEV for
	// 6.0 and 6.1 to 6.1.42 (whatever the device), ENOTSUPP (524) or
	// EOPNOTSUPP after its look for the device (6.1.43 to 6.3, 6.4 on).
	unknown   unix.Errno
	lookFirst bool // ENODEV for an absent device before the number is read (6.1.43 on)
	// checkOpFirst: a plain number it does not take is refused before the
	// look-up (6.4 on built without legacy opcodes: ublk_check_cmd_op).
	checkOpFirst bool
	dev          int        // its one device's ID
	stopped      bool       // STOP_DEV reached that device
	hangStop     bool       // STOP_DEV never answers (a hung daemon holds I/O)
	noProbe      bool       // the Control's probe (dev_id U32_MAX) gets no answer
	allAnswers   unix.Errno // when set, the answer to every command (EPERM: not CAP_SYS_ADMIN)

	// probeHangs: the probe's completion does not come before the
	// command's context ends; probeSubmitErr: the ring refuses the
	// probe's submission, with that error.
	probeHangs     bool
	probeSubmitErr error

	// unprivileged: its device was added with UBLK_F_UNPRIVILEGED_DEV, so
	// a command for it that does not name its char device (dev_path_len
	// 0) gets EINVAL, and one naming another node EPERM
	// (ublk_ctrl_uring_cmd_permission).
	unprivileged bool
	// addAfterEINVAL: another server adds a device under the ID the
	// kernel has just answered EINVAL for (6.0 and 6.1 to 6.1.42: no such
	// device), between that answer and the next command.
	addAfterEINVAL bool
	// addAfterENODEV: another server adds a device under the ID the kernel
	// has just answered ENODEV for (6.1.43 on: no such device), between
	// that answer and the next command; the kernel gives a free ID to the
	// next ADD_DEV, the lowest first.
	addAfterENODEV bool
	stoppedID      int // the device STOP_DEV reached, when stopped
	deleted        []int
	sent           []uint32
	ids            []int    // the device each command named
	paths          []string // the char device each command named ("" for none)
}

// control returns a Control whose commands go to k.
func (k *fakeKernel) control() *Control {
	c := &Control{pending: map[uint64][]byte{}}
	c.send = func(ctx context.Context, op uint32, id int, buf []byte, charDev string) (int32, error) {
		k.sent, k.ids, k.paths = append(k.sent, op), append(k.ids, id), append(k.paths, charDev)
		if k.allAnswers != 0 {
			return -int32(k.allAnswers), nil
		}
		if k.noProbe && id == probeDevID {
			return 0, context.DeadlineExceeded
		}
		if k.probeHangs && id == probeDevID {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		if k.probeSubmitErr != nil && id == probeDevID {
			return 0, k.probeSubmitErr
		}
		if k.checkOpFirst && op <= 0xff && !k.plain {
			return -int32(k.unknown), nil
		}
		if k.lookFirst && id != k.dev {
			if k.addAfterENODEV && id < MaxDevices {
				k.dev, k.addAfterENODEV = id, false
			}
			return -int32(unix.ENODEV), nil
		}
		if op > 0xff && !k.encoded || op <= 0xff && !k.plain {
			return -int32(k.unknown), nil
		}
		if id != k.dev { // 6.0's handlers: EINVAL, DEL_DEV's ENODEV
			if plainOp(op) == plainOp(cmdDelDev) {
				return -int32(unix.ENODEV), nil
			}
			if k.addAfterEINVAL && id < MaxDevices { // U32_MAX is "any free ID" to ADD_DEV: no device has it
				k.dev = id
			}
			return -int32(unix.EINVAL), nil
		}
		switch {
		case k.unprivileged && charDev == "":
			return -int32(unix.EINVAL), nil
		case k.unprivileged && charDev != fmt.Sprintf("/dev/ublkc%d", k.dev):
			return -int32(unix.EPERM), nil
		}
		if plainOp(op) == plainOp(cmdGetDevInfo) {
			k.answerDevInfo(buf, charDev)
		}
		if plainOp(op) == plainOp(cmdDelDev) {
			k.deleted = append(k.deleted, id)
		}
		if plainOp(op) == plainOp(cmdStopDev) {
			k.stopped, k.stoppedID = true, id
			if k.hangStop {
				<-ctx.Done()
				return 0, ctx.Err()
			}
		}
		return 0, nil
	}
	return c
}

// answerDevInfo writes GET_DEV_INFO's answer, the device's dev_id and
// flags, where the driver does: after the path for an unprivileged
// device, which takes the path off the command's buffer; at addr for the
// others, over a path the command named (the driver reads none), so buf,
// what follows the path, gets the answer's tail.
func (k *fakeKernel) answerDevInfo(buf []byte, charDev string) {
	info := make([]byte, devInfoSize)
	binary.NativeEndian.PutUint16(info[4:], uint16(StateLive))
	binary.NativeEndian.PutUint32(info[12:], uint32(k.dev))
	if k.unprivileged {
		binary.NativeEndian.PutUint64(info[24:], flagUnprivilegedDev)
		copy(buf, info)
		return
	}
	payload := append([]byte(charDev), make([]byte, len(buf))...)
	copy(payload, info)
	copy(buf, payload[len(charDev):])
}

// A kernel before 6.4 refuses the ioctl-encoded numbers, each kernel in
// its own way; the Control sends the plain number after the first
// refusal and the plain ones alone from then on. Before, every command
// failed there, and on 6.0 and 6.1 to 6.1.42, whose refusal is ENODEV,
// STOP_DEV and DEL_DEV took it for "no such device": done, the device
// live. An ENODEV is told from a device that does not exist by a probe
// first (GET_DEV_INFO 0x02 for dev_id U32_MAX, which no device has).
func TestControlSpeaksThePlainNumbersToAKernelBefore64(t *testing.T) {
	for name, tc := range map[string]struct {
		k    *fakeKernel
		sent []uint32
	}{
		"6.0 to 6.1.42: ENODEV": {&fakeKernel{plain: true, unknown: unix.ENODEV, dev: 3},
			[]uint32{cmdGetDevInfo, 0x02, 0x02, 0x07, 0x05}},
		"6.1.43 to 6.3: ENOTSUPP": {&fakeKernel{plain: true, unknown: errnoENOTSUPP, lookFirst: true, dev: 3},
			[]uint32{cmdGetDevInfo, 0x02, 0x07, 0x05}},
		"6.1.43 to 6.3 with the stable fix: EOPNOTSUPP": {&fakeKernel{plain: true, unknown: unix.EOPNOTSUPP, lookFirst: true, dev: 3},
			[]uint32{cmdGetDevInfo, 0x02, 0x07, 0x05}},
	} {
		t.Run(name, func(t *testing.T) {
			k := tc.k
			c, ctx := k.control(), t.Context()
			_, err := c.DevInfo(ctx, 3)
			require.NoError(t, err)
			require.NoError(t, c.StopDev(ctx, 3))
			assert.True(t, k.stopped, "STOP_DEV reached the device")
			require.NoError(t, c.DelDev(ctx, 3))
			assert.Equal(t, tc.sent, k.sent, "one refusal (and the ENODEV's probe), then the plain numbers alone")
		})
	}
}

// A STOP_DEV the kernel took and did not answer (a hung daemon holding
// I/O) is sent once; a kernel that refused the encoded number is sent
// the plain ones alone after it, so a teardown pays one refusal.
func TestControlSendsAHungStopOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := &fakeKernel{plain: true, unknown: errnoENOTSUPP, lookFirst: true, dev: 3, hangStop: true}
		c := k.control()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := c.StopDev(ctx, 3)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorContains(t, err, "STOP_DEV dev 3 (plain 0x07)")
		_, err = c.DevInfo(t.Context(), 3)
		require.NoError(t, err)
		assert.Equal(t, []uint32{cmdStopDev, 0x07, 0x02}, k.sent)
	})
}

// Only an unknown command's answer sends the plain number: EPERM (every
// number gets it without CAP_SYS_ADMIN) and a command's own error are
// not retried, and once the kernel took an encoded number ENODEV is a
// device that does not exist.
func TestControlRetriesOnlyARefusedNumber(t *testing.T) {
	k := &fakeKernel{allAnswers: unix.EPERM}
	_, err := k.control().DevInfo(t.Context(), 3)
	require.ErrorIs(t, err, unix.EPERM)
	assert.Equal(t, []uint32{cmdGetDevInfo}, k.sent)

	k = &fakeKernel{plain: true, encoded: true, lookFirst: true, dev: 3, unknown: unix.EOPNOTSUPP} // 6.4 on
	c := k.control()
	_, err = c.DevInfo(t.Context(), 3)
	require.NoError(t, err)
	require.NoError(t, c.StopDev(t.Context(), 9), "no device 9: ENODEV is done")
	assert.Equal(t, []uint32{cmdGetDevInfo, cmdStopDev}, k.sent)

	k.allAnswers, k.sent = unix.EBUSY, nil
	require.ErrorIs(t, c.DelDev(t.Context(), 3), unix.EBUSY)
	assert.Equal(t, []uint32{cmdDelDev}, k.sent)
}

// ENODEV to the first encoded number may be 6.0's refusal or a device
// that does not exist: the probe's plain number tells. Refused (6.4 on
// built without legacy opcodes), the ENODEV was the device's, and the
// encoded numbers are the kernel's.
func TestControlTellsAnAbsentDeviceFromARefusal(t *testing.T) {
	k := &fakeKernel{encoded: true, unknown: unix.EOPNOTSUPP, lookFirst: true, checkOpFirst: true, dev: 3}
	c := k.control()
	require.NoError(t, c.StopDev(t.Context(), 9), "no device 9")
	require.NoError(t, c.StopDev(t.Context(), 3))
	assert.True(t, k.stopped)
	assert.Equal(t, []uint32{cmdStopDev, 0x02, cmdStopDev}, k.sent)
	assert.Equal(t, []int{9, probeDevID, 3}, k.ids)
}

// A kernel that refuses both encodings (no ublk driver behind the file)
// gets an error naming the command, both numbers and both answers.
func TestControlErrorNamesBothEncodingsRefused(t *testing.T) {
	for _, refusal := range []unix.Errno{unix.EOPNOTSUPP, errnoENOTSUPP} {
		k := &fakeKernel{unknown: refusal, lookFirst: true, dev: 3}
		_, err := k.control().DevInfo(t.Context(), 3)
		require.ErrorIs(t, err, refusal)
		assert.ErrorContains(t, err, "ublk: GET_DEV_INFO dev 3: refused as an unknown command in both encodings: ioctl 0x80207502: "+
			refusal.Error()+"; plain 0x02: "+refusal.Error())
	}
}

// UsePlainNumbers sends the plain numbers alone, first command included,
// on a kernel that takes both.
func TestUsePlainNumbersSendsThemAlone(t *testing.T) {
	k := &fakeKernel{plain: true, encoded: true, lookFirst: true, dev: 3}
	c := k.control()
	c.UsePlainNumbers()
	require.NoError(t, c.StopDev(t.Context(), 3))
	assert.Equal(t, []uint32{0x07}, k.sent)
}

// A device added with UBLK_F_UNPRIVILEGED_DEV (its ublkcN and ublkbN
// owned by a user) takes a control command only with its char device's
// path in the command (dev_path_len, the path at addr), from root too;
// without it the driver answers EINVAL, before it looks at the command.
// The Control sends the command again naming /dev/ublkcN, beside the
// control device it opened. Before, GET_DEV_INFO, STOP_DEV and DEL_DEV
// all failed EINVAL: a hung daemon's unprivileged device could not be
// stopped, so the step could never kill the daemon safely.
func TestCommandsToAnUnprivilegedDeviceNameItsCharDevice(t *testing.T) {
	k := &fakeKernel{plain: true, encoded: true, lookFirst: true, dev: 3, unprivileged: true}
	c := k.control()
	c.charDir = "/dev"
	_, err := c.DevInfo(t.Context(), 3)
	require.NoError(t, err)
	require.NoError(t, c.StopDev(t.Context(), 3))
	assert.True(t, k.stopped, "STOP_DEV reached the device")
	require.NoError(t, c.DelDev(t.Context(), 3))
	assert.Equal(t, []uint32{cmdGetDevInfo, cmdGetDevInfo, cmdStopDev, cmdGetDevInfo, cmdStopDev, cmdDelDev, cmdGetDevInfo, cmdDelDev}, k.sent,
		"STOP_DEV and DEL_DEV sent again only once GET_DEV_INFO naming the path found an unprivileged device 3")
	assert.Equal(t, []string{"", "/dev/ublkc3", "", "/dev/ublkc3", "/dev/ublkc3", "", "/dev/ublkc3", "/dev/ublkc3"}, k.paths,
		"each command sent without the path first: a privileged device's GET_DEV_INFO would write its answer over a path")

	k = &fakeKernel{plain: true, encoded: true, lookFirst: true, dev: 3, unprivileged: true}
	c = k.control()
	c.charDir = "/elsewhere"
	err = c.StopDev(t.Context(), 3)
	require.ErrorIs(t, err, unix.EPERM, "a node that is not the device's")
	assert.ErrorContains(t, err, "ublk: STOP_DEV dev 3 (naming /elsewhere/ublkc3: UBLK_F_UNPRIVILEGED_DEV): operation not permitted")
	assert.ErrorContains(t, err, "without it: invalid argument")
}

// 6.0 and 6.1 to 6.1.42 answer EINVAL for a device that does not exist,
// and know no UBLK_F_UNPRIVILEGED_DEV: a command naming a char device
// there is the same command again, and GET_DEV_INFO's answer goes where
// the path is. Another server adds a device under the ID between that
// EINVAL and the resend: the resend reaches only a device that took the
// path (its GET_DEV_INFO, naming the path, answers after it with its own
// dev_id and UBLK_F_UNPRIVILEGED_DEV). Before, STOP_DEV, sent again,
// stopped the other server's new device, and GET_DEV_INFO returned, as
// the device's, the tail of an answer written over the path (dev_id 0).
//
// Where the probe tells the kernel (rows 2522, 2523), such an EINVAL is a
// device gone, and nothing is sent again; the guard stands where it does
// not (the probe unanswered).
func TestAResendNamingTheCharDeviceReachesOnlyAnUnprivilegedDevice(t *testing.T) {
	k := &fakeKernel{plain: true, unknown: unix.ENODEV, dev: -1, addAfterEINVAL: true, noProbe: true}
	c := k.control()
	c.UsePlainNumbers()
	c.charDir = "/dev"
	err := c.StopDev(t.Context(), 3)
	require.ErrorIs(t, err, unix.EINVAL, "no device 3 when STOP_DEV came, the kernel not told")
	assert.False(t, k.stopped, "the device added under ID 3 since is not stopped")
	assert.Equal(t, []uint32{0x07, 0x02, 0x02}, k.sent, "the probe, then GET_DEV_INFO naming the path asked first")
	assert.Equal(t, []string{"", "", "/dev/ublkc3"}, k.paths)

	k = &fakeKernel{plain: true, unknown: unix.ENODEV, dev: -1, addAfterEINVAL: true, noProbe: true}
	c = k.control()
	c.UsePlainNumbers()
	c.charDir = "/dev"
	_, err = c.DevInfo(t.Context(), 3)
	require.ErrorIs(t, err, unix.EINVAL, "no device 3 when GET_DEV_INFO came")
	assert.ErrorContains(t, err, "not an unprivileged device's")

	k = &fakeKernel{plain: true, unknown: unix.ENODEV, dev: -1, addAfterEINVAL: true}
	c = k.control()
	c.charDir = "/dev"
	require.NoError(t, c.StopDev(t.Context(), 3), "the probe told 6.0's EINVAL: no device 3, done")
	assert.False(t, k.stopped, "the device added under ID 3 since is not stopped")
	assert.Equal(t, []uint32{cmdStopDev, 0x02, 0x07}, k.sent, "nothing sent again")
}

// withoutCapSysAdmin runs f on a thread whose effective capabilities lack
// CAP_SYS_ADMIN, as a step run in a container that was not given it. The
// thread is never given back to the runtime: its goroutine ends locked to
// it, and the runtime ends the thread.
func withoutCapSysAdmin(t *testing.T, f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if !assert.NoError(t, unix.Capget(&hdr, &data[0])) {
			return
		}
		data[unix.CAP_SYS_ADMIN/32].Effective &^= 1 << (unix.CAP_SYS_ADMIN % 32)
		if !assert.NoError(t, unix.Capset(&hdr, &data[0])) {
			return
		}
		f()
	}()
	<-done
}

// A step run without CAP_SYS_ADMIN gets EPERM from the driver for every
// control command (but those for a device added with
// UBLK_F_UNPRIVILEGED_DEV): the error says that the process lacks it.
// Before, "ublk: GET_DEV_INFO dev 3: operation not permitted" named no
// capability, and the step's Report repeated it for every device.
func TestControlSaysAnEPERMIsTheMissingCapSysAdmin(t *testing.T) {
	withoutCapSysAdmin(t, func() {
		k := &fakeKernel{allAnswers: unix.EPERM}
		_, err := k.control().DevInfo(t.Context(), 3)
		assert.ErrorIs(t, err, unix.EPERM)
		assert.ErrorContains(t, err, "ublk: GET_DEV_INFO dev 3: operation not permitted: this process lacks CAP_SYS_ADMIN")
	})
}

// 6.0 and 6.1 to 6.1.42 answer STOP_DEV for a device that does not exist
// EINVAL (ublk_ctrl_stop_dev's own lookup), where later kernels answer
// ENODEV: a device that went (its daemon deleted it before the fallback's
// STOP_DEV) is stopped there as well. The Control knows such a kernel by
// its ENODEV to an ioctl-encoded number its plain one answered. Before,
// only ENODEV was done, and the step reported a failed STOP_DEV, "invalid
// argument", for a device that was gone.
func TestStopOfAGoneDeviceIsDoneOnAKernelThatAnswersEINVAL(t *testing.T) {
	k := &fakeKernel{plain: true, unknown: unix.ENODEV, dev: 3}
	c := k.control()
	c.charDir = "/dev"
	require.NoError(t, c.StopDev(t.Context(), 3), "device 3 there: stopped")
	require.NoError(t, c.StopDev(t.Context(), 4), "no device 4 when STOP_DEV came: done, as an ENODEV")
	assert.Equal(t, []uint32{cmdStopDev, 0x02, 0x07, 0x07}, k.sent,
		"one refusal and its probe, then the plain numbers; a device 4 not sent STOP_DEV again")

	k = &fakeKernel{plain: true, unknown: unix.ENODEV, dev: -1}
	c = k.control()
	c.charDir = "/dev"
	require.NoError(t, c.StopDev(t.Context(), 3), "the first command, to a device gone: done")

	k = &fakeKernel{plain: true, encoded: true, lookFirst: true, dev: 3, unprivileged: true} // 6.5 on
	c = k.control()
	c.charDir = "/elsewhere"
	require.NoError(t, c.StopDev(t.Context(), 9), "no device 9: ENODEV")
	require.Error(t, c.StopDev(t.Context(), 3), "a kernel that answers ENODEV for a device gone: its EINVAL is not done")
}

// On 6.4 on, an ioctl-encoded number answered ENODEV names a device that
// does not exist, as on every kernel from 6.1.43; only 6.0 and 6.1 to
// 6.1.42 answer ENODEV to a number they do not know, whatever the device.
// The Control told the two by sending the command again with its plain
// number, and another server adds a device under the freed ID (the
// kernel gives the lowest free ID to the next ADD_DEV) between the two
// sends. Before, the plain DEL_DEV deleted that new device, another
// server's disk (a plain STOP_DEV stopped it), and its answer made the
// Control take the kernel for 6.0's for its life: the plain numbers
// alone, and a STOP_DEV answered EINVAL counted done. Now a probe no device can change tells the two
// (GET_DEV_INFO for dev_id U32_MAX: EINVAL from 6.0's handlers, ENODEV
// from a kernel that looks the device up first), and the command is not
// sent again.
//
//	DEL_DEV 0xc0207505 dev 3 ── ENODEV (device 3 deleted by its daemon)
//	                    another server's ADD_DEV gets ID 3
//	before: DEL_DEV 0x05 dev 3 ── deletes the new device 3
//	after:  GET_DEV_INFO 0x02 dev U32_MAX ── ENODEV: the first ENODEV was device 3's, done
func TestAnENODEVIsToldFromARefusalWithoutSendingTheCommandAgain(t *testing.T) {
	k := &fakeKernel{plain: true, encoded: true, unknown: unix.EOPNOTSUPP, lookFirst: true, dev: -1, addAfterENODEV: true} // 6.4 on
	c := k.control()
	require.NoError(t, c.DelDev(t.Context(), 3), "no device 3 when DEL_DEV came: done")
	assert.Empty(t, k.deleted, "the device another server added under ID 3 since is not deleted")
	assert.Equal(t, []uint32{cmdDelDev, 0x02}, k.sent)
	assert.Equal(t, []int{3, 0xffffffff}, k.ids, "the probe names no device any kernel can have")

	k = &fakeKernel{plain: true, encoded: true, unknown: unix.EOPNOTSUPP, lookFirst: true, dev: -1, addAfterENODEV: true}
	c = k.control()
	require.NoError(t, c.StopDev(t.Context(), 3))
	assert.False(t, k.stopped, "the new device 3 is not stopped")
	_, err := c.DevInfo(t.Context(), 3)
	require.NoError(t, err)
	assert.Equal(t, []uint32{cmdStopDev, 0x02, cmdGetDevInfo}, k.sent, "the kernel not taken for one before 6.4: its encoded numbers sent")
}

// 6.0 and 6.1 to 6.1.42 answer GET_DEV_INFO, as STOP_DEV, for a device
// that does not exist EINVAL (their ublk_ctrl_get_dev_info looked the
// device up itself: `if (!ub) return -EINVAL`, until bfbcef036396 moved
// the look-up before the command, ENODEV), and know no
// UBLK_F_UNPRIVILEGED_DEV. On such a kernel a device that went before the
// fallback read it is now gone, ENODEV, as a later kernel answers, and no
// command is sent again naming /dev/ublkcN. Before, "invalid argument
// (the answer naming /dev/ublkc4: … not an unprivileged device's answer)",
// after one GET_DEV_INFO more naming the path.
func TestDevInfoOfAGoneDeviceIsGoneOnAKernelThatAnswersEINVAL(t *testing.T) {
	k := &fakeKernel{plain: true, unknown: unix.ENODEV, dev: 3}
	c := k.control()
	c.charDir = "/dev"
	_, err := c.DevInfo(t.Context(), 3)
	require.NoError(t, err, "device 3 there")
	_, err = c.DevInfo(t.Context(), 4)
	require.ErrorIs(t, err, unix.ENODEV, "no device 4: gone")
	assert.NotErrorIs(t, err, unix.EINVAL)
	assert.ErrorContains(t, err, "ublk: GET_DEV_INFO dev 4 (plain 0x02): no such device")
	assert.Equal(t, []string{"", "", "", ""}, k.paths, "no command named a char device")

	k = &fakeKernel{plain: true, encoded: true, lookFirst: true, dev: 3, unprivileged: true} // 6.5 on
	c = k.control()
	c.charDir = "/elsewhere"
	_, err = c.DevInfo(t.Context(), 3)
	require.Error(t, err)
	assert.NotErrorIs(t, err, unix.ENODEV, "a kernel of 6.5 on: its EINVAL is no device gone")
}

// KernelAge names what the probe told of each kernel's driver, and the
// probe is sent once per Control.
func TestKernelAgeNamesWhatTheProbeTold(t *testing.T) {
	for want, k := range map[string]*fakeKernel{
		"6.0 or 6.1 to 6.1.42":          {plain: true, unknown: unix.ENODEV, dev: 3},
		"6.1.43 on":                     {plain: true, encoded: true, unknown: unix.EOPNOTSUPP, lookFirst: true, dev: 3},
		"6.4 on without legacy opcodes": {encoded: true, unknown: unix.EOPNOTSUPP, lookFirst: true, checkOpFirst: true, dev: 3},
	} {
		c := k.control()
		for range 2 {
			age, err := c.KernelAge(t.Context())
			require.NoError(t, err)
			assert.Equal(t, want, age)
		}
		assert.Equal(t, []int{probeDevID}, k.ids, want)
	}
	_, err := (&fakeKernel{noProbe: true}).control().KernelAge(t.Context())
	assert.ErrorContains(t, err, "ublk: probe GET_DEV_INFO (plain 0x02) dev 0xffffffff: context deadline exceeded")
}

// An ENODEV to an encoded number whose probe got no answer is not told
// from 6.0's refusal of the number, whatever the device: not a device
// that does not exist, so STOP_DEV and DEL_DEV are not done on it, and
// the error says why; the command is not sent again.
func TestAnENODEVTheProbeDidNotTellIsNoDeviceGone(t *testing.T) {
	k := &fakeKernel{plain: true, unknown: unix.ENODEV, dev: 3, noProbe: true} // 6.0: device 3 live
	c := k.control()
	err := c.StopDev(t.Context(), 3)
	require.Error(t, err, "not done: device 3 may be live")
	assert.NotErrorIs(t, err, unix.ENODEV)
	assert.ErrorContains(t, err, "ublk: STOP_DEV dev 3: answered ENODEV (no such device); whether that was the device's, or a refusal of the number by a kernel before 6.1.43, not told: "+
		"the probe GET_DEV_INFO (plain 0x02) dev 0xffffffff not read")
	assert.False(t, k.stopped)
	assert.Equal(t, []uint32{cmdStopDev, 0x02}, k.sent)
}

// Fault (docs/faults.md row 2763): the command answered ENODEV and the
// probe that tells it from 6.0's refusal of the number was not read: its
// context ended before the probe's completion, or the ring refused the
// probe's submission. The error wrapped the probe's, the context's end
// or the ring's errno, so ublk's devStep, which takes an error wrapping
// its context's end for a command the kernel runs on, recorded STOP_DEV
// or DEL_DEV "sent; not complete" and pending, where the kernel had
// answered it, and a refused submission read as the device's error. It
// now says that the command was answered and the probe not read, and
// wraps neither.
//
//	0 s  STOP_DEV 0xc0207507 dev 3: ENODEV (6.0's refusal, or no device 3)
//	     the probe GET_DEV_INFO 0x02 dev U32_MAX: no completion
//	1 s  the context ends: STOP_DEV answered, the probe not read
func TestAnENODEVWhoseProbeWasNotReadSaysTheCommandWasAnswered(t *testing.T) {
	t.Run("the context ended before the probe's answer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			k := &fakeKernel{plain: true, unknown: unix.ENODEV, dev: 3, probeHangs: true} // 6.0: device 3 live
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			err := k.control().StopDev(ctx, 3)
			require.Error(t, err, "not done: device 3 may be live")
			assert.NotErrorIs(t, err, unix.ENODEV)
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "answered: not a command the kernel runs on")
			assert.EqualError(t, err, "ublk: STOP_DEV dev 3: answered ENODEV (no such device); whether that was the device's, or a refusal of the number by a kernel before 6.1.43, not told: "+
				"the probe GET_DEV_INFO (plain 0x02) dev 0xffffffff not read: the context ended before its answer (context deadline exceeded)")
			assert.Equal(t, []uint32{cmdStopDev, 0x02}, k.sent)
		})
	})
	t.Run("the probe's submission refused", func(t *testing.T) {
		busy := fmt.Errorf("uring: io_uring_enter: %w", unix.EBUSY)
		k := &fakeKernel{plain: true, unknown: unix.ENODEV, dev: 3, probeSubmitErr: busy}
		err := k.control().DelDev(t.Context(), 3)
		require.Error(t, err)
		assert.NotErrorIs(t, err, unix.ENODEV)
		assert.NotErrorIs(t, err, unix.EBUSY, "the ring's errno, not the device's")
		assert.EqualError(t, err, "ublk: DEL_DEV dev 3: answered ENODEV (no such device); whether that was the device's, or a refusal of the number by a kernel before 6.1.43, not told: "+
			"the probe GET_DEV_INFO (plain 0x02) dev 0xffffffff not read: not sent or not answered (uring: io_uring_enter: device or resource busy)")
		assert.Empty(t, k.deleted)
	})
}
