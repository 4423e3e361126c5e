//go:build linux

package blockdev

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A bounded read given up on says why from its thread's state when the
// bound passed, not from the bound alone: a read the kernel holds (here a
// read of a pipe nobody writes, as the first kernels hold a ring's fdinfo
// for its lock) waited in the kernel; reads that were running, or waiting
// for a CPU or the Go scheduler, when the bound passed (a busy machine:
// a load of 10 on 2 cores) did not, whatever the load. Before, both were
// "the kernel waited for the ring's lock".
func TestReadGivenUpOnSaysWhetherTheKernelHeldIt(t *testing.T) {
	t.Run("held in the kernel", func(t *testing.T) {
		var p [2]int
		require.NoError(t, unix.Pipe(p[:]))
		defer unix.Close(p[0])
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			// the bound passes once the read is asleep in the kernel,
			// however long the machine takes to get it there
			for !readingFD(p[0]) {
				time.Sleep(time.Millisecond)
			}
			cancel()
		}()
		_, ok, late := within(ctx, "a pipe nobody writes", time.Hour, func() error {
			_, err := unix.Read(p[0], make([]byte, 1))
			return err
		})
		assert.False(t, ok)
		assert.Equal(t, kernelWaited, late)
		assert.Equal(t, " (the kernel waited for the ring's lock)", late.says("the kernel waited for the ring's lock"))
		require.NoError(t, unix.Close(p[1])) // EOF: the abandoned read ends
	})
	t.Run("running", func(t *testing.T) {
		var stop, ended atomic.Bool
		_, ok, late := within(context.Background(), "slow reads", time.Millisecond, func() int {
			defer ended.Store(true)
			n := 0
			for !stop.Load() { // slow reads: running, or waiting to run
				n++
			}
			return n
		})
		stop.Store(true)
		assert.False(t, ok)
		assert.Equal(t, notRun, late)
		assert.Equal(t, " (not waiting in the kernel: the machine was too busy to run the reads in time)", late.says("the kernel waited"))
		for !ended.Load() {
			time.Sleep(time.Millisecond)
		}
	})
	t.Run("parked by the Go runtime", func(t *testing.T) {
		release := make(chan struct{})
		_, ok, late := within(context.Background(), "a parked read", time.Millisecond, func() bool {
			<-release // a goroutine parked: its locked thread sleeps in futex
			return true
		})
		close(release)
		assert.False(t, ok)
		assert.Equal(t, notRun, late)
	})
}

// readingFD reports whether a thread of this process is asleep in read(2)
// of fd.
func readingFD(fd int) bool {
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/syscall")
		if err != nil {
			continue // ended
		}
		if strings.HasPrefix(string(b), fmt.Sprintf("%d 0x%x ", unix.SYS_READ, fd)) {
			return true
		}
	}
	return false
}
