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
// (fds, maps, mountinfo per mount namespace, swaps) and reports it as a ratio to
// the bare readlink walk measured in the same run ("x_readlink_walk"), so
// the figure does not depend on how busy the machine is.
func BenchmarkHolders(b *testing.B) {
	ctx := context.Background()
	dev := blockdev.DevNum{Major: 4000, Minor: 0}
	const rounds = 20
	start := time.Now()
	links := 0
	for range rounds {
		links = readlinkWalk()
	}
	base := time.Since(start) / rounds
	b.ResetTimer()
	for b.Loop() {
		if _, err := blockdev.Holders(ctx, "/proc", dev); err != nil {
			b.Fatal(err)
		}
	}
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(per)/float64(base), "x_readlink_walk")
	b.ReportMetric(float64(links), "fds")
}
