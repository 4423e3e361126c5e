//go:build linux

package vmtest

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// IsInit reports whether this process is the guest's /init: process 1 of a
// vmtest guest, as the kernel starts it from the initramfs.
func IsInit() bool { return os.Getpid() == 1 && fileExists(guestConfigPath) }

// MaybeInit turns the process into the guest's /init when IsInit is true,
// and does nothing otherwise. Call it first thing in TestMain of a package
// with guest tests. As /init it never returns: it mounts /proc, /sys,
// devtmpfs on /dev and a tmpfs on /tmp, loads the configured kernel
// modules, runs the test binary again as an ordinary child process with
// the configured flags, relays its output to the console, reaps every
// orphan, dumps the kernel log and powers the machine off.
func MaybeInit() {
	if !IsInit() {
		return
	}
	code, err := runInit()
	if err != nil {
		say("error %v", err)
	}
	dumpKernelLog()
	say("exit %d", code)
	powerOff()
	// Should the power-off fail, process 1 exiting panics the kernel and
	// panic=-1 ends the boot just the same.
	os.Exit(code)
}

// powerOff ends the machine once the console has sent every byte written
// to it: a line still in the serial port's buffer at the power-off never
// reaches the host (seen under load: the last test's end line lost).
// -no-reboot makes QEMU exit.
func powerOff() {
	_ = unix.IoctlSetInt(int(os.Stdout.Fd()), unix.TCSBRK, 1) // tcdrain
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}

// PowerOff ends the guest machine in the middle of the calling test, the
// way a kernel panic would end it, except that everything the test process
// wrote before the call reaches the host first: /init powers the machine
// off when it relays the request, in order with the test's output. The
// host then reports every test that had not ended as missing. It never
// returns, and panics outside a guest.
func PowerOff() {
	if !InGuest() {
		panic("vmtest: PowerOff called outside a guest")
	}
	_, _ = os.Stdout.WriteString(powerOffRequest + "\n")
	for {
		time.Sleep(time.Hour) // until /init powers the machine off
	}
}

// say writes one status line to the console in a single write.
func say(format string, args ...any) {
	_, _ = os.Stdout.WriteString(statusMarker + fmt.Sprintf(format, args...) + "\n")
}

func runInit() (int, error) {
	if err := mountBasics(); err != nil {
		return 1, err
	}
	cfg, err := readGuestConfig()
	if err != nil {
		return 1, err
	}
	for _, m := range cfg.Modules {
		if err := loadModule(m); err != nil {
			return 1, err
		}
	}
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	release := unix.ByteSliceToString(uts.Release[:])
	say("ready %s", release)
	return runTests(cfg, release)
}

func mountBasics() error {
	mounts := []struct{ fstype, target string }{
		{"proc", "/proc"}, {"sysfs", "/sys"}, {"devtmpfs", "/dev"}, {"tmpfs", "/tmp"},
	}
	for _, m := range mounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.fstype, m.target, m.fstype, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
		}
	}
	return nil
}

func readGuestConfig() (guestConfig, error) {
	var cfg guestConfig
	b, err := os.ReadFile(guestConfigPath)
	if err != nil {
		return cfg, err
	}
	return cfg, json.Unmarshal(b, &cfg)
}

// loadModule loads a module file with finit_module; a compressed one
// (.xz, .zst, .gz) is handed to the kernel as it is, for the kernel to
// decompress (CONFIG_MODULE_DECOMPRESS).
func loadModule(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	flags := 0
	if strings.HasSuffix(path, ".xz") || strings.HasSuffix(path, ".zst") || strings.HasSuffix(path, ".gz") {
		flags = unix.MODULE_INIT_COMPRESSED_FILE
	}
	if err := unix.FinitModule(int(f.Fd()), "", flags); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load module %s: %w", path, err)
	}
	return nil
}

// runTests starts the test binary (this executable) as a child, relays its
// output line by line and reaps children until the test process exits.
func runTests(cfg guestConfig, release string) (int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 1, err
	}
	env := append([]string{guestEnv + "=" + release, "PATH=/", "HOME=/tmp", "TMPDIR=/tmp"}, cfg.Env...)
	proc, err := os.StartProcess("/init", append([]string{"/init"}, cfg.Args...), &os.ProcAttr{
		Dir:   "/",
		Env:   env,
		Files: []*os.File{nil, w, w},
	})
	w.Close()
	if err != nil {
		r.Close()
		return 1, fmt.Errorf("start guest tests: %w", err)
	}
	relayed := make(chan struct{})
	go func() { relayLines(r); close(relayed) }()
	code := reapUntil(proc.Pid)
	// A process the tests left running may still hold the pipe; give the
	// relay a moment to drain what the test process wrote, then go on.
	select {
	case <-relayed:
	case <-time.After(2 * time.Second):
		say("error output pipe still held open after the test process exited")
	}
	return code, nil
}

// relayLines copies each line of r to the console behind outputMarker,
// and powers the machine off at a PowerOff request, after the lines before
// it. It returns when every writer of the pipe has closed it.
func relayLines(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if sc.Text() == powerOffRequest {
			say("power off requested by a guest test")
			powerOff()
		}
		_, _ = os.Stdout.WriteString(outputMarker + sc.Text() + "\n")
	}
}

// reapUntil waits for any child, as process 1 must, until pid has exited,
// and returns pid's exit code (128+signal when killed).
func reapUntil(pid int) int {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 1
		}
		if got != pid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// dumpKernelLog writes the kernel log to the console behind kmsgMarker.
func dumpKernelLog() {
	lines, err := KernelLog()
	if err != nil {
		say("error %v", err)
	}
	for _, l := range lines {
		_, _ = os.Stdout.WriteString(kmsgMarker + l + "\n")
	}
}

// KernelLog returns the text of every record in the kernel log
// (/dev/kmsg), oldest first, without waiting for new ones.
func KernelLog() ([]string, error) {
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("vmtest: open /dev/kmsg: %w", err)
	}
	defer unix.Close(fd)
	var lines []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EPIPE) { // a record was overwritten; go on
			continue
		}
		if err != nil || n <= 0 {
			return lines, nil
		}
		// "prio,seq,usec,flags;text\n" followed by " KEY=value" lines.
		rec := string(buf[:n])
		if i := strings.IndexByte(rec, ';'); i >= 0 {
			rec = rec[i+1:]
		}
		rec, _, _ = strings.Cut(rec, "\n")
		lines = append(lines, rec)
	}
}
