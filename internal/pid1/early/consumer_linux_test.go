package early

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// roleEnv makes the test binary the consumer program instead of the tests.
const roleEnv = "EARLY_TEST_CONSUMER"

// handled are the signals the consumer handles, as the supervisor handles
// its own (examples/supervisor, catchSignals): every other one this package
// caught, it gives back to the Go runtime when it takes the channel.
var handled = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1}

// consumer is a program that takes Signals over as pid1.Init and the
// supervisor do, once its test says so. It prints "caught=BOOL pid=N"
// (Signals not nil, its PID), then answers its stdin's commands, a line
// each:
//   - len: "len N", how many signals wait on the channel, none taken;
//   - take: gives back to the Go runtime every signal caught but the
//     handled ones (signal.Reset), prints "took", then "got SIGNAL" for
//     each signal it receives on the channel, those caught before first.
//
// It exits 0 when its stdin closes.
func consumer() int {
	ch := Signals()
	fmt.Printf("caught=%v pid=%d\n", ch != nil, os.Getpid())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "len":
			fmt.Println("len", len(ch))
		case "take":
			var back []os.Signal
			for n := syscall.Signal(1); n <= 64; n++ {
				if n != syscall.SIGURG && n != syscall.SIGCHLD && !slices.Contains(handled, os.Signal(n)) {
					back = append(back, n)
				}
			}
			signal.Reset(back...)
			fmt.Println("took")
			go func() {
				for sig := range ch {
					fmt.Println("got", unix.SignalName(sig.(syscall.Signal)))
				}
			}()
		default:
			fmt.Println("unknown command", in.Text())
			return 3
		}
	}
	return 0
}
