//go:build linux

package blockdev_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/blockdev"
)

// readlinkWalk is the floor any holders scan pays: list /proc and read
// every fd link of every process.
func readlinkWalk() int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		fdDir := filepath.Join("/proc", e.Name(), "fd")
		fds, _ := os.ReadDir(fdDir)
		for _, fd := range fds {
			if _, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil {
				n++
			}
		}
	}
	return n
}

// BenchmarkHolders measures one full holders scan of this machine's /proc
// (fds, maps, mountinfo per mount namespace, swaps) and reports it as a
// ratio to the bare readlink walk ("x_readlink_walk"), each scan paired
// with a walk just before it, so the figure does not depend on how busy
// the machine is, nor on how its load changes during the run.
func BenchmarkHolders(b *testing.B) {
	ctx := context.Background()
	dev := blockdev.DevNum{Major: 4000, Minor: 0}
	var walks, scans time.Duration
	links := 0
	for b.Loop() {
		b.StopTimer()
		start := time.Now()
		links = readlinkWalk()
		walks += time.Since(start)
		b.StartTimer()
		start = time.Now()
		if _, err := blockdev.Holders(ctx, "/proc", dev); err != nil {
			b.Fatal(err)
		}
		scans += time.Since(start)
	}
	b.ReportMetric(float64(scans)/float64(walks), "x_readlink_walk")
	b.ReportMetric(float64(links), "fds")
}
