//go:build linux

package vmtest

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// selftestEnv makes the guest's self-test cases misbehave on purpose, so
// the host can check that the harness reports failures and crashes.
const selftestEnv = "VMTEST_SELFTEST_MISBEHAVE"

// TestGuestHasInitEnvironment checks what /init promises the guest tests.
func TestGuestHasInitEnvironment(t *testing.T) {
	GuestOnly(t)
	assert.Equal(t, 1, os.Getppid(), "the guest tests run as a child of /init")
	for _, p := range []string{"/proc/self/status", "/sys/class", "/dev/null", "/dev/ublk-control"} {
		_, err := os.Stat(p)
		assert.NoError(t, err, "%s must exist: proc, sysfs, devtmpfs mounted and ublk_drv loaded", p)
	}
	mods, err := os.ReadFile("/proc/modules")
	require.NoError(t, err)
	assert.Contains(t, string(mods), "ublk_drv")
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs("/tmp", &st))
	assert.Equal(t, int64(unix.TMPFS_MAGIC), int64(st.Type), "/tmp is a tmpfs")
	var uts unix.Utsname
	require.NoError(t, unix.Uname(&uts))
	assert.Equal(t, unix.ByteSliceToString(uts.Release[:]), os.Getenv(guestEnv))
}

// TestGuestKernelLogIsReadable checks KernelLog in the guest: the boot
// banner is the first record.
func TestGuestKernelLogIsReadable(t *testing.T) {
	GuestOnly(t)
	log, err := KernelLog()
	require.NoError(t, err)
	require.NotEmpty(t, log)
	assert.Contains(t, log[0], "Linux version")
	assert.Empty(t, KernelProblems(log))
}

// TestGuestSelftestFails fails on purpose when the host asks for it.
func TestGuestSelftestFails(t *testing.T) {
	GuestOnly(t)
	if os.Getenv(selftestEnv) == "" {
		t.Skip("fails only in the harness self-test")
	}
	t.Log("about to fail on purpose")
	t.Error("deliberate failure")
}

// TestGuestSelftestPowersOff powers the guest off in the middle of a test
// when the host asks for it, as a kernel panic would end it.
func TestGuestSelftestPowersOff(t *testing.T) {
	GuestOnly(t)
	if os.Getenv(selftestEnv) == "" {
		t.Skip("powers off only in the harness self-test")
	}
	t.Log("powering off mid-test")
	PowerOff()
}

// TestHarnessReportsPassFailAndCrash boots the guest once with the
// self-test switch on and checks that each way a guest test can end
// reaches the host: a pass, a failure with its log line, and a test cut
// short by the machine going away, which must be reported missing.
func TestHarnessReportsPassFailAndCrash(t *testing.T) {
	g := BuildGuest(t, Config{
		Run:     "^TestGuest",
		Modules: []string{"ublk_drv"},
		Env:     []string{selftestEnv + "=1"},
		Timeout: time.Minute,
	})
	res, err := g.Run(t.Context(), nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("console:\n%s", strings.Join(res.Console, "\n"))
		}
	})
	assert.Equal(t, g.Assets.Release, res.Release, "the guest runs the cached kernel")
	assert.Equal(t, []string{"TestGuestHasInitEnvironment", "TestGuestKernelLogIsReadable", "TestGuestSelftestFails", "TestGuestSelftestPowersOff"}, g.Expected)

	pass, ok := res.Test("TestGuestHasInitEnvironment")
	require.True(t, ok)
	assert.Equal(t, Pass, pass.Status, strings.Join(pass.Output, "\n"))

	fail, ok := res.Test("TestGuestSelftestFails")
	require.True(t, ok)
	assert.Equal(t, Fail, fail.Status)
	assert.Contains(t, strings.Join(fail.Output, "\n"), "deliberate failure")

	assert.Equal(t, []string{"TestGuestSelftestPowersOff"}, res.Missing)
	assert.Contains(t, strings.Join(res.Stray, "\n"), "powering off mid-test")
	assert.Equal(t, -1, res.ExitCode, "the test binary never exited")
}
