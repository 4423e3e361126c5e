package blockdev_test

import (
	"bufio"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// envHold makes the test binary, re-executed, open this block device, say
// "ready" and wait for stdin to close: the "VMM".
const envHold = "BLOCKDEV_TEST_HOLD"

func TestMain(m *testing.M) {
	if p := os.Getenv(envHold); p != "" {
		os.Exit(holdOpen(p))
	}
	goleak.VerifyTestMain(m)
}

func holdOpen(path string) int {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	defer f.Close()
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}
