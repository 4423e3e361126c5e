//go:build linux

package procstat_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"

	"golang.org/x/sys/unix"

	"github.com/drainkit/drainkit/internal/procstat"
)

// Tell a zombie (exited, not yet reaped by its parent) from a process that
// is gone.
func ExampleRead() {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		fmt.Println(err)
		return
	}
	pid := cmd.Process.Pid
	_ = cmd.Process.Kill()
	var info unix.Siginfo
	_ = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil) // exited, not reaped
	for _, when := range []string{"killed", "reaped"} {
		st, err := procstat.Read(pid)
		if errors.Is(err, fs.ErrNotExist) {
			// gone: exited and reaped
			fmt.Println(when+":", "gone")
			continue
		}
		zombie := st.State == 'Z'
		fmt.Println(when+":", "zombie", zombie, "child of this process", st.PPID == os.Getpid())
		_ = cmd.Wait()
	}
	// Output:
	// killed: zombie true child of this process true
	// reaped: gone
}
