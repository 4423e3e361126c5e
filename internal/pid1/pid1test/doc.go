// Package pid1test starts a test binary as PID 1 of a new PID namespace, as a pod's
// container runtime starts the container's command, and checks what an init must
// guarantee there: no zombie left. The tests of internal/pid1 and of the node servers
// built on it (examples/gvisor-worker, examples/sandboxd) share it.
//
// The test binary's TestMain, in the role of the program, mounts the /proc of its own PID
// namespace first when the test asked for it (ProcEnv), as a container runtime does:
//
//	func TestMain(m *testing.M) {
//		if os.Getenv(roleEnv) != "" {
//			if err := pid1test.MountProc(); err != nil {
//				fmt.Fprintln(os.Stderr, "mounting /proc:", err)
//				os.Exit(1)
//			}
//			pid1.Init() // as main does
//			os.Exit(Main(context.Background(), os.Args[1:], os.Stderr))
//		}
//		goleak.VerifyTestMain(m)
//	}
//
// and the test starts it as PID 1, checks its namespace and waits for its exit:
//
//	cmd := exec.Command(os.Args[0], args...)
//	cmd.Env = append(os.Environ(), roleEnv+"=1", pid1test.ProcEnv+"=1")
//	p := pid1test.StartPID1(t, cmd)
//	pid1test.NoZombies(t, p.Cmd.Process.Pid)
//	require.NoError(t, p.Cmd.Process.Signal(syscall.SIGTERM))
//	err := p.Wait(t, time.Minute, "PID 1 did not exit")
//
// A new PID namespace needs root (CAP_SYS_ADMIN); the caller decides whether a test
// without it is skipped. The test's cleanup kills every process Start or StartPID1
// started (a SIGKILL to PID 1 ends its whole namespace) and waits for its exit.
package pid1test
