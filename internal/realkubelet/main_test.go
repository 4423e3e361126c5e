package realkubelet

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

// scenariosAtOnce is go test's -parallel for this package unless the
// command gives one. Every parallel test here is one scenario of a group
// on one Node, each its own pod, as a drain deletes a node's pods
// together: the suite's seven deletions and the real API server's five
// shorter deletions, which run at once, and the gVisor-runtime timings,
// which take two at a time of their own (their sentries' CPU). The
// scenarios wait on the kubelet's timers, not on the CPU, but go test's
// default -parallel, GOMAXPROCS (2 on CI's machine), ran each group two
// at a time: the shorter deletions took 47 s where at once they take 24 s,
// the suite's deletions 29 s against 17-20 s. More than the widest group,
// so that one more scenario still runs beside the others.
const scenariosAtOnce = 8

func TestMain(m *testing.M) {
	flag.Parse()
	if err := defaultParallel(scenariosAtOnce); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m)
}

// defaultParallel sets -test.parallel to n when the command line did not
// set it and n is more than go test's default, GOMAXPROCS: an explicit
// -parallel (-parallel 1 to run the scenarios one after another) wins.
func defaultParallel(n int) error {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given || n <= runtime.GOMAXPROCS(0) {
		return nil
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		return fmt.Errorf("realkubelet: setting -test.parallel to %d: %w", n, err)
	}
	return nil
}
