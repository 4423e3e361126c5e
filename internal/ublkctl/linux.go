//go:build linux

package ublkctl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/uring"
)

// Control is a Controller over /dev/ublk-control: each command is an
// IORING_OP_URING_CMD on a ring set up with IORING_SETUP_SQE128. Commands
// are sent one at a time. A command whose ctx ends before the kernel
// answers keeps running in the kernel (the ublk driver does not cancel
// control commands); its buffer stays referenced until its completion
// arrives or Close. A device ID outside [0, MaxDevices) is an error, the
// command not sent.
//
// A command goes with its ioctl-encoded number (UBLK_U_CMD_*, Linux 6.4
// on) first. A kernel before 6.4 (or a vendor's backport of that age)
// knows only the plain numbers (UBLK_CMD_*, which 6.4 on still takes
// unless built without CONFIG_BLKDEV_UBLK_LEGACY_OPCODES), and answers
// the encoded one as an unknown command: ENOTSUPP (errno 524: 6.1.43 on,
// 6.2, 6.3), EOPNOTSUPP (such a kernel carrying 34c1227035b3, 6.13's fix),
// or ENODEV (6.0 and 6.1 to 6.1.42, the answer those give a device that
// does not exist too).
// The same command then goes once more with its plain number, after an
// ENODEV only once a probe no device can change said the kernel is one
// of 6.0 and 6.1 to 6.1.42 (see probeAge): on a later one the ENODEV was
// the device's, and the command is not sent again. When the probe told
// nothing (not answered before ctx ended, its submission refused), the
// error says the command was answered ENODEV and the probe not read, and
// wraps neither ENODEV nor ctx's end: the command did complete, and what
// its answer means is not known. The Control keeps to
// one encoding for the rest of its life once the kernel has shown which
// it takes: the encoded one when one got an answer of the command's own
// (success, or an error other than ENODEV, EPERM and an unknown
// command's), or when the probe's plain number was refused (6.4 on
// without legacy opcodes); the plain one when an encoded number was
// refused as unknown and the plain one was not, or the probe told a
// kernel of 6.0 and 6.1 to 6.1.42. So an older kernel costs one refusal
// (and one probe) per Control, not one per command, and a command the
// kernel took and did not answer (STOP_DEV under a hung daemon) is never
// sent again. EPERM and a command's own errors are not retried, nor
// ENODEV once the encoded numbers are known.
//
// The command sent again goes to whatever device has the ID by then (6.0
// and 6.1 to 6.1.42 after the probe; 6.1.43 to 6.3 look the device up
// before they refuse the number, so the first send found the caller's
// device): one deleted and another added under its ID (the lowest free, to
// the next ADD_DEV) between the two sends gets the second. The window is
// one command's round trip (two with the probe) (on the 6.12 guest
// under TCG, the host loaded: GET_DEV_INFO median 255 µs, p99 9.5 ms, max
// 32 ms), and a device added under a freed ID answers as soon as its
// ADD_DEV returns (DEAD, ublksrv_pid -1). The driver has no command that
// acts on a device only if it is the one meant, so a check in between
// would have its own window: a caller sends GET_DEV_INFO first, whose
// resend only reads, and a STOP_DEV or DEL_DEV after it goes once (ublk's
// step does so, docs/faults.md row 3081). Errors name the plain number
// when that answered, and both numbers and answers when both were
// refused.
//
// 6.0 and 6.1 to 6.1.42 answer GET_DEV_INFO and STOP_DEV for a device
// that does not exist EINVAL (their handlers looked the device up
// themselves: `if (!ub) return -EINVAL`, until bfbcef036396 moved the
// look-up before the command, ENODEV, in 6.2 and 6.1.43). On a kernel
// the probe told as one of those, a plain command's EINVAL is such a
// device, and reads as a later kernel's answer: ENODEV.
//
// A device added with UBLK_F_UNPRIVILEGED_DEV (a user's server, 6.5 on)
// takes a command only when it names the device's char device: its path
// at addr before the command's own buffer, dev_path_len its length. The
// driver answers one that does not EINVAL, from root too, before it reads
// the command; a command so answered goes once more naming ublkcN in the
// control device's directory (/dev/ublkcN), and the error of one refused
// then names that path. The driver asks no path of the other devices, and
// writes GET_DEV_INFO's answer where a path would be, so none is sent
// first. The resend goes only to a device that took the path (see
// tryNamingCharDev).
//
// The driver answers EPERM to every command of a process without
// CAP_SYS_ADMIN (but those naming an unprivileged device's char device);
// the error then says that the process lacks it.
type Control struct {
	f    *os.File
	ring *uring.Ring
	// send sends a command with number op and returns the kernel's
	// answer (the completion's result); err is a command not answered
	// (not submitted, or ctx ended). charDev, when not empty, is the
	// device's char device path the command names (dev_path_len, the
	// path at addr before buf). Open sets the ring's; nil once closed.
	send func(ctx context.Context, op uint32, id int, buf []byte, charDev string) (res int32, err error)
	// charDir is the directory of the devices' char device nodes
	// (ublkcN): the control device's.
	charDir string

	mu      sync.Mutex
	seq     uint64
	pending map[uint64][]byte // buffers the kernel may still write
	enc     encoding          // the numbers the kernel was seen to take
	age     kernelAge         // what probeAge told of the kernel, once it told
}

// Open opens the ublk control device at path (DefaultPath
// when empty) and sets up its ring. A missing device fails with an error
// wrapping ErrNoControl.
func Open(path string) (*Control, error) {
	if path == "" {
		path = DefaultPath
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENODEV) {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoControl, path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("ublk: open %s: %w", path, err)
	}
	ring, err := uring.New(4, uring.SetupSQE128)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("ublk: control ring: %w", err)
	}
	c := &Control{f: f, ring: ring, pending: map[uint64][]byte{}, charDir: filepath.Dir(path)}
	c.send = c.submit
	return c, nil
}

// UsePlainNumbers makes c send the plain command numbers alone from now
// on, as it does once the kernel refused an ioctl-encoded one: for a
// caller that knows its kernel, and for the tests, which check on a kernel
// taking both that the plain numbers reach the driver.
func (c *Control) UsePlainNumbers() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.enc = encPlain
}

// DevInfo sends GET_DEV_INFO for device id. Its error for a device that
// does not exist wraps ENODEV, on 6.0 and 6.1 to 6.1.42 too, whose EINVAL
// for one reads so (see Control).
func (c *Control) DevInfo(ctx context.Context, id int) (DevInfo, error) {
	buf := make([]byte, devInfoSize)
	if err := c.do(ctx, cmdGetDevInfo, id, buf); err != nil {
		return DevInfo{}, err
	}
	return decodeDevInfo(buf), nil
}

// StopDev sends STOP_DEV for device id; a device that does not exist
// (ENODEV, or the EINVAL of 6.0 and 6.1 to 6.1.42: see Control) counts as
// done. A device added under the ID since is another server's, and is
// not sent the command again.
func (c *Control) StopDev(ctx context.Context, id int) error {
	err := c.do(ctx, cmdStopDev, id, nil)
	if errors.Is(err, unix.ENODEV) {
		return nil
	}
	return err
}

// DelDev sends DEL_DEV for device id; ENODEV counts as done and EINTR is
// retried while ctx lasts.
func (c *Control) DelDev(ctx context.Context, id int) error {
	for {
		err := c.do(ctx, cmdDelDev, id, nil)
		switch {
		case errors.Is(err, unix.ENODEV):
			return nil
		case errors.Is(err, unix.EINTR) && ctx.Err() == nil:
			continue
		default:
			return err
		}
	}
}

// do sends one command and waits for its completion until ctx ends, in
// the encoding the kernel takes (see Control). An ID no device can have
// is not sent (see MaxDevices).
func (c *Control) do(ctx context.Context, op uint32, id int, buf []byte) error {
	if id < 0 || id >= MaxDevices {
		return fmt.Errorf("ublk: %s: device ID %d out of range [0, %d): not sent", cmdName(op), id, MaxDevices)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.send == nil {
		return errors.New("ublk: control closed")
	}
	if c.enc == encPlain {
		_, err := c.try(ctx, plainOp(op), op, id, buf)
		return err
	}
	answer, err := c.try(ctx, op, op, id, buf)
	if ownAnswer(answer) {
		c.enc = encIoctl
	}
	if c.enc == encIoctl || !refusedEncoded(answer) {
		return err
	}
	if errors.Is(answer, unix.ENODEV) {
		// 6.0's refusal of a number it does not know, or no device with
		// the ID: the probe tells, where the plain command itself went to
		// whatever device had the ID by then (another server's, added
		// since: the kernel gives the lowest free ID to the next ADD_DEV).
		age, perr := c.probeAge(ctx)
		switch {
		case perr != nil:
			return untoldENODEV(ctx, op, id, perr)
		case age == agePlainRefused:
			c.enc = encIoctl
			return err
		case age != ageHandlersLookUp:
			return err // the device's: no device has the ID
		}
		c.enc = encPlain
	}
	plainAnswer, plainErr := c.try(ctx, plainOp(op), op, id, buf)
	switch {
	case unknownCommand(plainAnswer):
		return fmt.Errorf("ublk: %s dev %d: refused as an unknown command in both encodings: ioctl %#x: %w; plain 0x%02x: %w",
			cmdName(op), id, op, answer, plainOp(op), plainAnswer)
	case unknownCommand(answer) || ownAnswer(plainAnswer):
		c.enc = encPlain
	}
	return plainErr
}

// kernelAge is what probeAge told of the kernel's ublk driver.
type kernelAge uint8

const (
	ageUnknown        kernelAge = iota // not probed, or not told
	ageHandlersLookUp                  // 6.0 and 6.1 to 6.1.42: each handler looks the device up, EINVAL for none
	ageLooksUpFirst                    // 6.1.43 on: the device is looked up before the command, ENODEV for none
	agePlainRefused                    // 6.4 on built without CONFIG_BLKDEV_UBLK_LEGACY_OPCODES
)

// probeDevID is a dev_id no device has on any kernel: ADD_DEV takes
// U32_MAX for "any free ID", and the driver's look-up
// (ublk_get_device_from_id, whose idx is an int) finds no device for -1.
const probeDevID = 0xffffffff

// probeAge tells the kernel's age by one command whose answer no device
// can change (the caller holds c.mu): GET_DEV_INFO, plain, for
// probeDevID. 6.0 and 6.1 to 6.1.42 answer it EINVAL (their
// ublk_ctrl_get_dev_info's own look-up); 6.1.43 on ENODEV (the look-up
// before the command); 6.4 on built without legacy opcodes refuse the
// plain number (EOPNOTSUPP, or ENOTSUPP). The answer is kept: the kernel
// is probed once. Any other answer, or none, tells nothing (its error).
func (c *Control) probeAge(ctx context.Context) (kernelAge, error) {
	if c.age != ageUnknown {
		return c.age, nil
	}
	res, err := c.send(ctx, plainOp(cmdGetDevInfo), probeDevID, make([]byte, devInfoSize), "")
	answer := unix.Errno(-res)
	switch {
	case err != nil:
		return ageUnknown, &probeNotRead{err}
	case answer == unix.EINVAL:
		c.age = ageHandlersLookUp
	case answer == unix.ENODEV:
		c.age = ageLooksUpFirst
	case res < 0 && unknownCommand(answer):
		c.age = agePlainRefused
	default:
		return ageUnknown, fmt.Errorf("probe GET_DEV_INFO (plain 0x%02x) dev %#x: answered %d, which no kernel gives", plainOp(cmdGetDevInfo), probeDevID, res)
	}
	return c.age, nil
}

// KernelAge says what the probe tells of the kernel's ublk driver (see
// probeAge; the answer kept from an earlier command's if there was one):
// "6.0 or 6.1 to 6.1.42" (each handler looks the device up: EINVAL for
// none), "6.1.43 on" (the look-up before the command: ENODEV), or "6.4 on
// without legacy opcodes" (the plain numbers refused); its error when the
// probe told nothing.
func (c *Control) KernelAge(ctx context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.send == nil {
		return "", errors.New("ublk: control closed")
	}
	age, err := c.probeAge(ctx)
	if err != nil {
		return "", fmt.Errorf("ublk: %w", err)
	}
	return age.String(), nil
}

// String names the kernels of age a.
func (a kernelAge) String() string {
	switch a {
	case ageHandlersLookUp:
		return "6.0 or 6.1 to 6.1.42"
	case ageLooksUpFirst:
		return "6.1.43 on"
	case agePlainRefused:
		return "6.4 on without legacy opcodes"
	}
	return "unknown"
}

// probeNotRead is probeAge's error when the probe got no answer: not
// sent (the ring refused it), or its context ended before its completion.
type probeNotRead struct{ err error }

func (e *probeNotRead) Error() string {
	return fmt.Sprintf("probe GET_DEV_INFO (plain 0x%02x) dev %#x: %v", plainOp(cmdGetDevInfo), probeDevID, e.err)
}

func (e *probeNotRead) Unwrap() error { return e.err }

// untoldENODEV is do's error for the command op to device id, answered
// ENODEV, when the probe that tells a device that does not exist from 6.0's
// refusal of the number told nothing (perr, probeAge's error). The command
// was answered: the error wraps neither ENODEV (STOP_DEV and DEL_DEV would
// count it done, the device maybe live) nor the probe's context's end,
// which a caller takes for a command the kernel runs on (ublk's devStep:
// "sent; not complete", pending), nor the ring's errno, which would read
// as the device's (docs/faults.md row 2763).
func untoldENODEV(ctx context.Context, op uint32, id int, perr error) error {
	why := perr.Error() // the probe answered as no kernel does
	var notRead *probeNotRead
	if errors.As(perr, &notRead) {
		why = fmt.Sprintf("the probe GET_DEV_INFO (plain 0x%02x) dev %#x not read: ", plainOp(cmdGetDevInfo), probeDevID)
		if ctx.Err() != nil && errors.Is(notRead.err, ctx.Err()) {
			why += fmt.Sprintf("the context ended before its answer (%v)", ctx.Err())
		} else {
			why += fmt.Sprintf("not sent or not answered (%v)", notRead.err)
		}
	}
	return fmt.Errorf("ublk: %s dev %d: answered ENODEV (%v); whether that was the device's, or a refusal of the number by a kernel before 6.1.43, not told: %s",
		cmdName(op), id, unix.ENODEV, why)
}

// try sends op (the command cmd, in one of its encodings) and returns
// the kernel's answer, nil for success (absent when err is not: the
// command was not answered), and the error the caller returns, naming
// the command and, for a plain number, that number.
func (c *Control) try(ctx context.Context, op, cmd uint32, id int, buf []byte) (answer, err error) {
	what := fmt.Sprintf("ublk: %s dev %d", cmdName(cmd), id)
	if op != cmd {
		what += fmt.Sprintf(" (plain 0x%02x)", op)
	}
	res, err := c.send(ctx, op, id, buf, "")
	if err == nil && res == -int32(unix.EINVAL) {
		if op == plainOp(op) && c.gonesAreEINVAL(ctx) {
			return unix.ENODEV, fmt.Errorf("%s: %w (the kernel's EINVAL, its answer for a device that does not exist: 6.0 and 6.1 to 6.1.42)",
				what, unix.ENODEV)
		}
		if c.charDir != "" {
			return c.tryNamingCharDev(ctx, op, what, id, buf)
		}
	}
	if err != nil {
		return errNoAnswer, fmt.Errorf("%s: %w", what, err)
	}
	if res >= 0 {
		return nil, nil
	}
	if res == -int32(unix.EPERM) && !hasCapSysAdmin() {
		return unix.EPERM, fmt.Errorf("%s: %w: %s", what, unix.EPERM, lacksCapSysAdmin)
	}
	return unix.Errno(-res), fmt.Errorf("%s: %w", what, unix.Errno(-res))
}

// gonesAreEINVAL reports whether the kernel is one of 6.0 and 6.1 to
// 6.1.42, whose GET_DEV_INFO and STOP_DEV answer EINVAL for a device that
// does not exist (probeAge, asked now if it was not); a plain number's
// EINVAL is the only one such a kernel gives (it knows no ioctl-encoded
// number, nor UBLK_F_UNPRIVILEGED_DEV). Not told: false, the EINVAL an
// error as on a later kernel.
func (c *Control) gonesAreEINVAL(ctx context.Context) bool {
	if c.enc == encIoctl {
		return false // the kernel took an encoded number: 6.4 on
	}
	age, _ := c.probeAge(ctx)
	return age == ageHandlersLookUp
}

// lacksCapSysAdmin ends the error of a command answered EPERM by a process
// without CAP_SYS_ADMIN, which names what is wrong where the errno alone
// does not.
const lacksCapSysAdmin = "this process lacks CAP_SYS_ADMIN, which the ublk driver asks of every control command " +
	"(but those naming the char device of a device added with UBLK_F_UNPRIVILEGED_DEV): " +
	"give the container CAP_SYS_ADMIN (securityContext.capabilities.add), or no ublk device can be stopped"

// hasCapSysAdmin reports whether the calling thread has CAP_SYS_ADMIN in
// its effective set, which the driver checks of the thread that submits a
// control command (every thread of a Go program has the same, unless one
// was changed alone). One that cannot be read counts as held: the error
// then says nothing it does not know.
func hasCapSysAdmin() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return true
	}
	return data[unix.CAP_SYS_ADMIN/32].Effective&(1<<(unix.CAP_SYS_ADMIN%32)) != 0
}

// tryNamingCharDev sends op again naming device id's char device
// (/dev/ublkcN, beside the control device), after the kernel answered it
// EINVAL without: a device added with UBLK_F_UNPRIVILEGED_DEV (6.5 on)
// takes no control command that does not name it, from root too, and
// the driver refuses one so before it reads the command. The command
// goes without the path first because a privileged device's ignores it
// and would write GET_DEV_INFO's answer where the path is. An EINVAL
// again is the command's own: the first answer stands.
//
// The EINVAL may instead be a device that does not exist (6.0 and 6.1 to
// 6.1.42 answer so), and another device may be added under the ID before
// the resend, which such a kernel, taking no path, would run the command
// on. So the resend goes only to a device that took the path: GET_DEV_INFO
// naming it answers its own dev_id and UBLK_F_UNPRIVILEGED_DEV (one that
// does not take it writes its answer over the path), and STOP_DEV and
// DEL_DEV are sent again only after such an answer.
func (c *Control) tryNamingCharDev(ctx context.Context, op uint32, what string, id int, buf []byte) (answer, err error) {
	charDev := filepath.Join(c.charDir, "ublkc"+strconv.Itoa(id))
	isInfo := plainOp(op) == plainOp(cmdGetDevInfo)
	if !isInfo {
		info := make([]byte, devInfoSize)
		if answer, err := c.sendNaming(ctx, infoOpLike(op), what, id, info, charDev); answer != nil {
			return answer, err
		}
		if why := notUnprivileged(info, id); why != "" {
			return unix.EINVAL, fmt.Errorf("%s: %w (not sent again naming %s: %s)", what, unix.EINVAL, charDev, why)
		}
	}
	if answer, err := c.sendNaming(ctx, op, what, id, buf, charDev); answer != nil || !isInfo {
		return answer, err
	}
	if why := notUnprivileged(buf, id); why != "" {
		return unix.EINVAL, fmt.Errorf("%s: %w (the answer naming %s: %s)", what, unix.EINVAL, charDev, why)
	}
	return nil, nil
}

// sendNaming sends op naming charDev after a first EINVAL to the command
// what names, and returns the answer and error tryNamingCharDev returns
// for one that failed (nil for success).
func (c *Control) sendNaming(ctx context.Context, op uint32, what string, id int, buf []byte, charDev string) (answer, err error) {
	res, err := c.send(ctx, op, id, buf, charDev)
	named := what + " (naming " + charDev + ": UBLK_F_UNPRIVILEGED_DEV)"
	switch {
	case err != nil:
		return errNoAnswer, fmt.Errorf("%s: %w", named, err)
	case res >= 0:
		return nil, nil
	case res == -int32(unix.EINVAL):
		return unix.EINVAL, fmt.Errorf("%s: %w", what, unix.EINVAL)
	}
	return unix.Errno(-res), fmt.Errorf("%s: %w (without it: %w)", named, unix.Errno(-res), unix.EINVAL)
}

// infoOpLike is GET_DEV_INFO in op's encoding (plain or ioctl).
func infoOpLike(op uint32) uint32 {
	if op == plainOp(op) {
		return plainOp(cmdGetDevInfo)
	}
	return cmdGetDevInfo
}

// notUnprivileged says why info, GET_DEV_INFO's answer read after the
// path a command named, is not device id's own as an unprivileged device
// gives it ("" when it is): a device that takes no path wrote its answer
// over the path, leaving here its tail.
func notUnprivileged(info []byte, id int) string {
	d := decodeDevInfo(info)
	switch {
	case d.DevID != uint32(id):
		return fmt.Sprintf("its dev_id %d is not %d: not an unprivileged device's answer", d.DevID, id)
	case d.Flags&flagUnprivilegedDev == 0:
		return fmt.Sprintf("flags %#x without UBLK_F_UNPRIVILEGED_DEV: not an unprivileged device's answer", d.Flags)
	}
	return ""
}

// submit sends one command on the ring and waits for its completion
// until ctx ends. A command naming charDev carries the path, then buf,
// at addr (the driver takes the path off before the command reads buf);
// buf gets what the kernel wrote after the path.
func (c *Control) submit(ctx context.Context, op uint32, id int, buf []byte, charDev string) (int32, error) {
	c.seq++
	tag := c.seq
	payload := buf
	if charDev != "" {
		payload = append([]byte(charDev), buf...)
	}
	var addr uint64
	if len(payload) > 0 {
		addr = uint64(uintptr(unsafe.Pointer(&payload[0])))
		c.pending[tag] = payload
	}
	cmd := encodeCtrlCmd(uint32(id), addr, uint16(len(payload)), 0, uint16(len(charDev)))
	if _, err := c.ring.Submit(uring.URingCmd(int(c.f.Fd()), op, cmd, tag)); err != nil {
		delete(c.pending, tag)
		return 0, err
	}
	for {
		cqe, err := c.ring.WaitCQE(ctx)
		if err != nil {
			return 0, err
		}
		delete(c.pending, cqe.UserData) // an earlier, abandoned command may complete first
		if cqe.UserData == tag {
			copy(buf, payload[len(charDev):])
			return cqe.Res, nil
		}
	}
}

// Close closes the ring and the control device.
func (c *Control) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.send == nil {
		return nil
	}
	var err error
	if c.ring != nil {
		err = errors.Join(c.ring.Close(), c.f.Close())
	}
	c.f, c.ring, c.pending, c.send = nil, nil, nil, nil
	return err
}

func cmdName(op uint32) string {
	switch op {
	case cmdGetDevInfo:
		return "GET_DEV_INFO"
	case cmdStopDev:
		return "STOP_DEV"
	case cmdDelDev:
		return "DEL_DEV"
	}
	return fmt.Sprintf("cmd %#x", op)
}

// encoding is the command numbers a Control sends.
type encoding uint8

const (
	encUnknown encoding = iota // ioctl-encoded first, plain when refused
	encIoctl                   // UBLK_U_CMD_*: the kernel took one (6.4 on)
	encPlain                   // UBLK_CMD_*: the kernel refused the encoded ones
)

// errNoAnswer is try's answer when the kernel gave none.
var errNoAnswer = errors.New("no answer")

// errnoENOTSUPP is the kernel's ENOTSUPP, meant for the kernel alone,
// which ublk answered an unknown control command with from 6.2 (and
// 6.1.43) until 34c1227035b3 (6.13, stable 6.6.y and 6.12.y of December
// 2024) made it EOPNOTSUPP.
const errnoENOTSUPP = unix.Errno(524)

// unknownCommand reports whether answer is the ublk driver's answer to a
// command number it does not know.
func unknownCommand(answer error) bool {
	return errors.Is(answer, unix.EOPNOTSUPP) || errors.Is(answer, errnoENOTSUPP)
}

// refusedEncoded reports whether answer to an ioctl-encoded number may be
// a kernel's that knows only the plain ones: an unknown command, or
// ENODEV, which 6.0 and 6.1 to 6.1.42 give every command they do not
// know before looking for the device.
func refusedEncoded(answer error) bool {
	return unknownCommand(answer) || errors.Is(answer, unix.ENODEV)
}

// ownAnswer reports whether answer is the command's own: success or an
// error its handler gives, not one every number gets before the driver
// looks at it (EPERM), nor an unknown command's, nor ENODEV (which a
// device that does not exist gets whatever the number), nor none.
func ownAnswer(answer error) bool {
	return answer == nil || answer != errNoAnswer && !unknownCommand(answer) &&
		!errors.Is(answer, unix.ENODEV) && !errors.Is(answer, unix.EPERM)
}
