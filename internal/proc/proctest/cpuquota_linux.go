//go:build linux

package proctest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/realpart"
)

// CPUQuota makes a cgroup whose processes may run quota of every period
// between them (CFS bandwidth control: cgroup v2's cpu.max, or v1's
// cpu.cfs_quota_us and cpu.cfs_period_us), as a container at its CPU
// limit, and returns its cgroup.procs file: a process that writes its pid
// there (JoinCgroup) runs under the quota from then on, every thread. Once
// what runs in it has used the quota, the kernel stops it until the next
// period. Where the machine has no CPU controller this process may use
// (not root) t is skipped, or failed under CI=true. The cgroup is removed
// at t's cleanup, once its processes have gone.
func CPUQuota(t testing.TB, quota, period time.Duration) (procs string) {
	t.Helper()
	dir, limit, err := cpuCgroup(t.Name())
	if err != nil {
		realpart.Missing(t, "no CPU controller to make a cgroup in: "+err.Error())
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		realpart.Missing(t, "no CPU controller to make a cgroup in: "+err.Error())
	}
	t.Cleanup(func() { removeCgroup(t, dir) })
	for _, w := range limit(quota.Microseconds(), period.Microseconds()) {
		file, value := w[0], w[1]
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
			t.Fatalf("the cgroup's %s: %v", file, err)
		}
	}
	return filepath.Join(dir, "cgroup.procs")
}

// JoinCgroup moves this process, every thread, into the cgroup whose
// cgroup.procs file is procs.
func JoinCgroup(procs string) error {
	return os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// cpuCgroup names a new cgroup for test under a hierarchy with the CPU
// controller (v2's, if it has it; else v1's), and what writes a limit
// there: file and value, in the order to write them.
func cpuCgroup(test string) (dir string, limit func(quota, period int64) [][2]string, err error) {
	name := fmt.Sprintf("drainkit-proctest-%d-%s", os.Getpid(), strings.NewReplacer("/", "-", " ", "-").Replace(test))
	const v2, v1 = "/sys/fs/cgroup", "/sys/fs/cgroup/cpu"
	for _, root := range []string{v2, "/sys/fs/cgroup/unified"} {
		if ctrls, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control")); err == nil && slices.Contains(strings.Fields(string(ctrls)), "cpu") {
			return filepath.Join(root, name), func(quota, period int64) [][2]string {
				return [][2]string{{"cpu.max", fmt.Sprintf("%d %d", quota, period)}}
			}, nil
		}
	}
	if _, err := os.Stat(filepath.Join(v1, "cpu.cfs_quota_us")); err != nil {
		return "", nil, err
	}
	return filepath.Join(v1, name), func(quota, period int64) [][2]string {
		return [][2]string{{"cpu.cfs_period_us", strconv.FormatInt(period, 10)}, {"cpu.cfs_quota_us", strconv.FormatInt(quota, 10)}}
	}, nil
}

// removeCgroup removes dir once the processes in it have gone (a child
// killed at an earlier cleanup is reaped shortly after), for up to 5 s.
func removeCgroup(t testing.TB, dir string) {
	var err error
	for range 50 {
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("the test's cgroup %s: %v", dir, err)
}
