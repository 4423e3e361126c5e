//go:build linux

package kubeletsim

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// becomeEnv marks the process Start runs as PID 1 of a new PID namespace:
// this same binary (/proc/self/exe), which mounts the namespace's /proc
// and execs the command in its own place, so the command keeps PID 1, as
// a container runtime's init does (runc's `runc init`). Its value is
// "FD IGNORED PATH": the descriptor to report a failure on, the signals
// the command starts ignoring (a bit each, as Start's own child inherits
// them), the program's path. The command's argv is this process's, its
// environment this process's variables under commandEnvPrefix.
//
// This binary is the one that called Start, so it has this package and its
// init. A shell did this before: it exported PWD (bash adds SHLVL and _),
// gave the command its path for argv[0], needed mount(8) in the command's
// PATH, and ran as a script a file the kernel cannot exec.
const becomeEnv = "DRAINKIT_KUBELETSIM_PID1"

func init() {
	if v, ok := syscall.Getenv(becomeEnv); ok {
		// Not os.Exit: its hooks are the caller's program's, and in a -race
		// binary its exit 0 waits GORACE's atexit_sleep_ms (1 s unset).
		syscall.Exit(becomeCommand(v))
	}
}

// procFlags are the flags runc mounts a container's /proc with.
const procFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC

// becomeCommand mounts the PID namespace's /proc and execs the program v
// names (becomeEnv); with no program (PIDNamespace's probe) it returns 0
// once /proc is mounted. On failure it reports the step and its errno on
// v's descriptor and returns 127.
func becomeCommand(v string) int {
	f := strings.SplitN(v, " ", 3)
	if len(f) != 3 {
		fmt.Fprintf(os.Stderr, "kubeletsim: %s=%q is not FD IGNORED PATH\n", becomeEnv, v)
		return 127
	}
	fd, _ := strconv.Atoi(f[0])
	ignored, _ := strconv.ParseUint(f[1], 16, 64)
	report := func(step string, err error) int {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EINVAL
		}
		if fd > 2 {
			_, _ = unix.Write(fd, []byte(fmt.Sprintf("%s %d", step, errno)))
		} else {
			fmt.Fprintf(os.Stderr, "kubeletsim: %s: %v\n", step, err)
		}
		return 127
	}
	if fd > 2 {
		unix.CloseOnExec(fd) // the command never sees it
	}
	if err := unix.Mount("proc", "/proc", "proc", procFlags, ""); err != nil {
		return report("mount", err)
	}
	if f[2] == "" {
		return 0
	}
	for n := range 64 {
		if ignored&(1<<n) != 0 {
			signal.Ignore(syscall.Signal(n + 1))
		}
	}
	return report("exec", syscall.Exec(f[2], os.Args, commandEnv(os.Environ())))
}

// commandEnvPrefix starts each variable of the command's environment in
// that of the binary that execs it, so that nothing before the exec takes
// one for its own: its dynamic loader (a -race binary is linked so) took
// the command's LD_PRELOAD, LD_LIBRARY_PATH, GLIBC_TUNABLES too.
const commandEnvPrefix = becomeEnv + "_ENV_"

// becomeEnviron is the environment of the binary that execs the command
// whose environment is env: env's variables under commandEnvPrefix, in
// their order, and becomeEnv=v.
func becomeEnviron(env []string, v string) []string {
	out := make([]string, 0, len(env)+1)
	for _, e := range env {
		out = append(out, commandEnvPrefix+e)
	}
	return append(out, becomeEnv+"="+v)
}

// commandEnv is the command's environment in env, becomeEnviron's.
func commandEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, e := range env {
		if c, ok := strings.CutPrefix(e, commandEnvPrefix); ok {
			out = append(out, c)
		}
	}
	return out
}

// ignoredSignals returns the signals this process ignores, a bit each
// (signal n at bit n-1): those a child it starts inherits ignored.
func ignoredSignals() uint64 {
	var mask uint64
	for n := range 64 {
		if signal.Ignored(syscall.Signal(n + 1)) {
			mask |= 1 << n
		}
	}
	return mask
}

// pidNamespaceErr is why a child cannot be PID 1 of a PID namespace of its
// own here, nil when it can: this binary started so once, with the /proc
// of its namespace mounted, and exited 0.
var pidNamespaceErr = sync.OnceValue(func() error {
	if out, err := probeCommand().CombinedOutput(); err != nil {
		return fmt.Errorf("kubeletsim: a child cannot be PID 1 of a PID namespace of its own here (root, CAP_SYS_ADMIN, needed): %w: %s",
			err, strings.TrimSpace(string(out)))
	}
	return nil
})

// probeCommand is PIDNamespace's try: this binary started as PID 1 of a
// PID namespace of its own, which mounts that namespace's /proc and exits.
func probeCommand() *exec.Cmd {
	probe := exec.Command("/proc/self/exe")
	probe.Args = []string{"kubeletsim-probe"}
	probe.Env = []string{becomeEnv + "=-1 0 "}
	probe.SysProcAttr = inNewPIDNamespace(&syscall.SysProcAttr{})
	return probe
}

// PIDNamespace returns why Start cannot run a child as PID 1 of a PID
// namespace of its own, as a pod's container runs, on this machine; nil
// when it can. Where it cannot (not root), Start runs a plain child.
func PIDNamespace() error { return pidNamespaceErr() }

// inNewPIDNamespace adds to attr a new PID namespace, and a new mount
// namespace in which /proc can be that PID namespace's; os/exec makes the
// mounts of the new one private (MS_REC|MS_PRIVATE on / after its
// unshare), so the mount of /proc stays in it, and goes with it.
func inNewPIDNamespace(attr *syscall.SysProcAttr) *syscall.SysProcAttr {
	attr.Cloneflags |= syscall.CLONE_NEWPID
	attr.Unshareflags |= syscall.CLONE_NEWNS
	return attr
}

// asPID1 makes cmd start as PID 1 of a PID namespace of its own, with that
// namespace's /proc, where this machine allows it (PIDNamespace): the
// process started is this binary (becomeEnv), which execs cmd's program
// in its place. It returns nil where cmd starts as a plain child, else
// started, which Start calls once cmd was started (or failed to): it
// waits until the program runs and returns the error os/exec's Start
// would have returned, had it started the program (ENOENT, ENOEXEC, ...),
// and gives cmd back its Path, ExtraFiles and Env.
func asPID1(cmd *exec.Cmd) (started func(startErr error) error, err error) {
	if PIDNamespace() != nil {
		return nil, nil
	}
	if cmd.Err != nil {
		return nil, cmd.Err
	}
	path, files, env := cmd.Path, cmd.ExtraFiles, cmd.Env
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("kubeletsim: %w", err)
	}
	if len(cmd.Args) == 0 {
		cmd.Args = []string{path} // os/exec's own default
	}
	cmd.Path = "/proc/self/exe"
	cmd.ExtraFiles = append(slices.Clip(files), w)
	cmd.Env = becomeEnviron(cmd.Environ(), fmt.Sprintf("%d %x %s", 3+len(files), ignoredSignals(), path))
	inNewPIDNamespace(cmd.SysProcAttr)
	return func(startErr error) error {
		_ = w.Close()
		defer r.Close()
		cmd.Path, cmd.ExtraFiles, cmd.Env = path, files, env
		if startErr != nil {
			return startErr
		}
		return becomeErr(r, path)
	}, nil
}

// becomeErr reads what the started binary reported on r until it
// exec'd the program at path (r's end closed with nothing written), and
// returns the failure as os/exec words one: fork/exec PATH: ERRNO.
func becomeErr(r io.Reader, path string) error {
	msg, err := io.ReadAll(r)
	if err != nil || len(msg) == 0 {
		return err
	}
	step, num, _ := strings.Cut(string(msg), " ")
	n, _ := strconv.Atoi(num)
	if step == "mount" {
		return fmt.Errorf("kubeletsim: mount the PID namespace's /proc: %w", syscall.Errno(n))
	}
	return &os.PathError{Op: "fork/exec", Path: path, Err: syscall.Errno(n)}
}
