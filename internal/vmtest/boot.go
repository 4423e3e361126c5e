package vmtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Machine is one QEMU boot of a kernel with an initramfs.
type Machine struct {
	QEMU      string // path of qemu-system-x86_64
	Kernel    string // kernel image
	Initramfs string // gzipped newc cpio archive with the /init to run
	MemoryMB  int    // guest memory; 512 when zero
	CPUs      int    // virtual CPUs; 1 when zero
	Append    string // extra kernel command line, after the console settings
}

// Boot runs the machine until the guest powers off, QEMU fails, or ctx is
// done, whichever comes first; on ctx's end QEMU is killed and Boot
// returns within a second. Every console line (without its trailing
// carriage return) goes to onLine as it arrives, from Boot's goroutine.
// The returned error is nil when QEMU exited normally, which is also what a
// guest power-off or kernel panic (panic=-1 with -no-reboot) looks like;
// guests report their own outcome on the console.
func (m Machine) Boot(ctx context.Context, onLine func(string)) error {
	mem, cpus := m.MemoryMB, m.CPUs
	if mem == 0 {
		mem = 512
	}
	if cpus == 0 {
		cpus = 1
	}
	cmdline := strings.TrimSpace("console=ttyS0 panic=-1 quiet " + m.Append)
	// TCG, not KVM: the host's KVM may be a nested or paravirtual one that
	// cannot run an ordinary guest kernel, and TCG is fast enough here.
	cmd := exec.CommandContext(ctx, m.QEMU,
		"-accel", "tcg", "-cpu", "max",
		"-m", strconv.Itoa(mem), "-smp", strconv.Itoa(cpus),
		"-nodefaults", "-no-reboot", "-display", "none", "-monitor", "none",
		"-serial", "stdio",
		"-kernel", m.Kernel, "-initrd", m.Initramfs,
		"-append", cmdline)
	cmd.WaitDelay = time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("vmtest: start qemu: %w", err)
	}
	scanLines(out, onLine)
	err = cmd.Wait()
	if ctx.Err() != nil {
		return fmt.Errorf("vmtest: guest still running when the boot's time ran out: %w", ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("vmtest: qemu: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// scanLines calls onLine for every line of r until r ends or fails.
func scanLines(r io.Reader, onLine func(string)) {
	br := bufio.NewReaderSize(r, 64*1024)
	for {
		s, err := br.ReadString('\n')
		if s != "" {
			onLine(strings.TrimRight(s, "\r\n"))
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				onLine("host: console read failed: " + err.Error())
			}
			return
		}
	}
}
