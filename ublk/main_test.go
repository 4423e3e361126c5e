package ublk_test

import (
	"bufio"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/fakeublk"
)

// Helper processes: the test binary re-executes itself with one of these
// variables set to play a part in a test.
const envHold = "UBLK_TEST_HOLD" // open this block device, say "ready", wait for stdin to close

func TestMain(m *testing.M) {
	fakeublk.MainIfDaemon()
	if p := os.Getenv(envHold); p != "" {
		os.Exit(holdOpen(p))
	}
	goleak.VerifyTestMain(m)
}

// holdOpen is the "VMM": it keeps a block device open until its stdin
// closes.
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
