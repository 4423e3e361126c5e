package pid1

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// programEnv makes the test binary Init and then run the program it names, as a server's
// main calls Init and then runs.
const programEnv = "PID1_TEST_PROGRAM"

// holdEnv names a FIFO that the init's child opens in its package initialisation, before
// main, and is held on until the test opens it too: a program whose start before main (the
// Go runtime, every package's init) takes long, as a big server's does on a loaded node.
const holdEnv = "PID1_TEST_HOLD_START"

// holdPID1Env is hold_test.go's HoldPID1Env (package pid1_test, initialised after pid1).
const holdPID1Env = "PID1_TEST_HOLD_PID1"

// readerEnv makes the "job" program start a reader of its terminal beside the init.
const readerEnv = "PID1_TEST_JOB_READER"

// noChildEnv makes PID 1 hide /proc before Init (a tmpfs over it, in the mount namespace
// of its own that pid1test.StartPID1 gives it), so that starting the child from
// /proc/self/exe fails and the program runs as PID 1 without the init.
const noChildEnv = "PID1_TEST_NO_CHILD"

func init() {
	if fifo := os.Getenv(holdEnv); fifo != "" && os.Getenv(ChildEnv) != "" {
		if f, err := os.Open(fifo); err == nil { // blocks until the test opens it for writing
			_ = f.Close()
		}
	}
}

func TestMain(m *testing.M) {
	if prog := os.Getenv(programEnv); prog != "" {
		if os.Getenv(noChildEnv) != "" && os.Getpid() == 1 {
			if err := hideProc(); err != nil {
				fmt.Fprintln(os.Stderr, "hiding /proc:", err)
				os.Exit(3)
			}
		}
		Init()
		os.Exit(program(prog))
	}
	goleak.VerifyTestMain(m)
}

// forwarded are the signals the "serve" program reports.
var forwarded = []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1,
	syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGTERM}

// program runs the test program prog and returns its exit status:
//   - serve: handles the signals of forwarded and says so (Ready), makes an orphan (starts "parent", which starts "orphan" and exits at once),
//     prints "ready env=" and ChildEnv's value, then "got SIGNAL" for each signal of forwarded it receives, and
//     exits 42 on SIGTERM;
//   - twice: handles SIGTERM and SIGWINCH (Ready), sends itself a SIGTERM at once (the
//     kubelet's, as the program starts serving) and, once it has it, a SIGWINCH, and prints
//     "SIGTERMs N", the SIGTERMs it got before the SIGWINCH, and exits 42;
//   - parent: starts "orphan", whose stdin is a pipe it holds, and exits without waiting;
//   - orphan: reads its stdin until its parent's end closes, then exits;
//   - fd3: writes a line to its fd 3, which its starter gave it (ExtraFiles), once
//     Ready, says how that went and exits 0;
//   - unlisten3: closes its fd 3, the listening socket its starter gave it, once Ready,
//     as a draining server stops listening, says how that went and waits to be killed;
//   - tty: handles SIGINT (Ready), says whether its process group is the foreground one of
//     its stdin's terminal, reads a line from the terminal and prints it, then exits 42 on
//     SIGINT (a Ctrl-C typed there);
//   - shell-fg-job, shell-bg-job: a shell with job control on its terminal (stdin) runs
//     "job" in a process group of its own, made the terminal's foreground one or not (a
//     command typed alone, or with &), and exits with its status;
//   - job: as `unshare --pid --fork` does, runs "foreground" as PID 1 of a new PID
//     namespace, in the job's process group (outside that namespace), and exits with its
//     status; with readerEnv set, it first starts cat on its terminal, in its own process
//     group, and waits until cat is asleep in its read (`cat | unshare -pf server`), then
//     runs "foreground" with its stdin /dev/null, and kills cat once that has exited;
//   - foreground: says whether its process group is the foreground one of its stdout's
//     terminal and exits 0;
//   - default: prints "ready" and waits for a signal, with Go's default handling of
//     SIGTERM: it dies by it.
func program(prog string) int {
	self := func(name string) *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), programEnv+"="+name)
		cmd.Stderr = os.Stderr
		return cmd
	}
	switch prog {
	case "serve":
		sigs := make(chan os.Signal, len(forwarded))
		for _, s := range forwarded {
			signal.Notify(sigs, s)
		}
		Ready()
		if err := self("parent").Run(); err != nil { // reaps the parent, never the orphan
			fmt.Println("parent:", err)
			return 1
		}
		fmt.Println("ready env=" + os.Getenv(ChildEnv))
		for sig := range sigs {
			fmt.Println("got", unix.SignalName(sig.(syscall.Signal)))
			if sig == syscall.SIGTERM {
				return 42
			}
		}
	case "parent":
		orphan := self("orphan")
		if _, err := orphan.StdinPipe(); err != nil {
			return 1
		}
		if err := orphan.Start(); err != nil {
			return 1
		}
		return 0 // the pipe's write end closes with this process
	case "orphan":
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		return 0
	case "twice":
		sigs := make(chan os.Signal, 8)
		signal.Notify(sigs, syscall.SIGTERM, syscall.SIGWINCH)
		Ready()
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
		n := 0
		for sig := range sigs {
			if sig == syscall.SIGWINCH {
				fmt.Println("SIGTERMs", n)
				return 42
			}
			if n++; n == 1 {
				// Sent once the SIGTERM is here: a second SIGTERM sent before it (the
				// hold's) is counted.
				_ = syscall.Kill(os.Getpid(), syscall.SIGWINCH)
			}
		}
	case "fd3":
		Ready()
		_, err := os.NewFile(3, "given").WriteString("fd 3 reached the program\n")
		fmt.Println("wrote fd 3:", err)
		return 0
	case "unlisten3":
		Ready()
		fmt.Println("closed fd 3:", syscall.Close(3))
		time.Sleep(time.Hour) // until the test's cleanup kills it: not a timing assertion
		return 0
	case "tty":
		return readTerminal()
	case "shell-fg-job", "shell-bg-job":
		job := self("job")
		job.Stdin, job.Stdout = os.Stdin, os.Stdout
		job.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Foreground: prog == "shell-fg-job", Ctty: 0}
		return exitCode(job.Run())
	case "job":
		init := self("foreground")
		init.Stdin, init.Stdout = os.Stdin, os.Stdout
		if os.Getenv(readerEnv) != "" {
			cat, err := readingTerminal()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			defer func() { _ = cat.Process.Kill(); _ = cat.Wait() }()
			init.Stdin = nil
		}
		if err := inNewPIDNamespace(init); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return exitCode(init.Run())
	case "foreground":
		foreground, err := unix.IoctlGetInt(1, unix.TIOCGPGRP)
		fmt.Println("foreground:", err == nil && foreground == syscall.Getpgrp())
		return 0
	case "default":
		Ready() // Go's default handling is the program's
		fmt.Println("ready")
		time.Sleep(time.Hour) // until a signal ends it: not a timing assertion
		return 0
	}
	return 3
}

// readingTerminal starts cat on this process's terminal (stdin and stdout) and returns
// once cat is asleep in its read of it, holding the terminal's read lock.
func readingTerminal() (*exec.Cmd, error) {
	cat := exec.Command("cat")
	cat.Stdin, cat.Stdout = os.Stdin, os.Stdout
	if err := cat.Start(); err != nil {
		return nil, err
	}
	wchan := fmt.Sprintf("/proc/%d/wchan", cat.Process.Pid)
	for {
		if b, err := os.ReadFile(wchan); err != nil || string(b) == "wait_woken" { // n_tty_read's sleep
			return cat, err
		}
		time.Sleep(time.Millisecond) // polls the state it waits for: no timing assertion
	}
}

// exitCode is the exit status of a command that ran with err, 1 when it could not run.
func exitCode(err error) int {
	var ee *exec.ExitError
	if err == nil || errors.As(err, &ee) {
		if ee != nil {
			return ee.ExitCode()
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// readTerminal is the "tty" program: an interactive program on a pod's terminal (tty: true).
func readTerminal() int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT)
	Ready()
	foreground, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	fmt.Println("foreground:", err == nil && foreground == syscall.Getpgrp())
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	fmt.Printf("read %q %v\n", line, err)
	<-sigs
	fmt.Println("got SIGINT")
	return 42
}
