package vmtest

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) {
	MaybeInit()
	goleak.VerifyTestMain(m)
}

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
	unix.Sync()
	require.NoError(t, unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF))
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
	if t.Failed() || testing.Verbose() {
		t.Logf("console:\n%s", strings.Join(res.Console, "\n"))
	}
	assert.Equal(t, g.Assets.Release, res.Release, "the guest runs the cached kernel")
	assert.Equal(t, []string{"TestGuestHasInitEnvironment", "TestGuestSelftestFails", "TestGuestSelftestPowersOff"}, g.Expected)

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

func TestInitramfsIsNewcCpioWithParents(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, writeInitramfs(&buf, []entry{
		fileEntry("init", 0o755, []byte("#!binary")),
		fileEntry("/a/b/c.txt", 0o644, []byte("hello")),
		{name: "dev/console", mode: cpioChar | 0o600, major: 5, minor: 1},
	}))
	zr, err := gzip.NewReader(&buf)
	require.NoError(t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err)

	got := readNewc(t, raw)
	var names []string
	for _, e := range got {
		names = append(names, e.name)
	}
	assert.Equal(t, []string{"init", "a", "dev", "dev/console", "a/b", "a/b/c.txt", "TRAILER!!!"}, names)
	byName := map[string]entry{}
	for _, e := range got {
		byName[e.name] = e
	}
	assert.Equal(t, "hello", string(byName["a/b/c.txt"].data))
	assert.Equal(t, uint32(cpioFile|0o644), byName["a/b/c.txt"].mode)
	assert.Equal(t, uint32(cpioDir|0o755), byName["a/b"].mode)
	assert.Equal(t, uint32(cpioFile|0o755), byName["init"].mode)
	assert.Equal(t, [2]uint32{5, 1}, [2]uint32{byName["dev/console"].major, byName["dev/console"].minor})
}

// readNewc parses a newc archive independently of the writer: 110-byte
// ASCII headers, name and data each padded to four bytes.
func readNewc(t *testing.T, raw []byte) []entry {
	t.Helper()
	var out []entry
	off := 0
	for off < len(raw) {
		require.GreaterOrEqual(t, len(raw)-off, 110)
		hdr := string(raw[off : off+110])
		require.Equal(t, "070701", hdr[:6], "magic at offset %d", off)
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(hdr[6+8*i:14+8*i], 16, 32)
			require.NoError(t, err)
			return uint32(v)
		}
		mode, size, rmaj, rmin, nameLen := field(1), field(6), field(9), field(10), field(11)
		nameStart := off + 110
		name := string(raw[nameStart : nameStart+int(nameLen)-1])
		dataStart := align4(nameStart + int(nameLen))
		e := entry{name: name, mode: mode, major: rmaj, minor: rmin}
		e.data = raw[dataStart : dataStart+int(size)]
		out = append(out, e)
		off = align4(dataStart + int(size))
		if name == "TRAILER!!!" {
			break
		}
	}
	assert.Equal(t, len(raw), off, "nothing after the trailer")
	return out
}

func align4(n int) int { return (n + 3) &^ 3 }

func TestResultParserAttributesOutputToTopLevelTests(t *testing.T) {
	out := `=== RUN   TestA
    a_test.go:10: hello from A
=== RUN   TestA/sub
    a_test.go:12: in sub
--- PASS: TestA (0.01s)
    --- PASS: TestA/sub (0.00s)
=== RUN   TestB
    b_test.go:3: broken
--- FAIL: TestB (1.50s)
=== RUN   TestC
    c_test.go:3: no ublk
--- SKIP: TestC (0.00s)
=== RUN   TestD
    d_test.go:1: started
panic: test timed out after 1m0s
FAIL`
	var got []TestResult
	p := newResultParser(func(tr TestResult) { got = append(got, tr) })
	for _, l := range strings.Split(out, "\n") {
		p.line(l)
	}
	require.Len(t, got, 3)
	assert.Equal(t, TestResult{Name: "TestA", Status: Pass, Elapsed: "0.01s", Output: []string{
		"=== RUN   TestA", "    a_test.go:10: hello from A", "=== RUN   TestA/sub",
		"    a_test.go:12: in sub", "--- PASS: TestA (0.01s)",
	}}, got[0])
	assert.Equal(t, Fail, got[1].Status)
	assert.Equal(t, "1.50s", got[1].Elapsed)
	assert.Contains(t, got[1].Output, "    b_test.go:3: broken")
	assert.Equal(t, Skip, got[2].Status)
	assert.Equal(t, []string{"=== RUN   TestD", "    d_test.go:1: started",
		"panic: test timed out after 1m0s", "FAIL"}, p.unfinished()["TestD"])
}

func TestResultConsumeFindsMarkersAfterKernelNoise(t *testing.T) {
	var got []TestResult
	p := newResultParser(func(tr TestResult) { got = append(got, tr) })
	r := &Result{ExitCode: -1}
	for _, l := range []string{
		"[    1.0] random: crng init done" + statusMarker + "ready 6.12.1-test",
		outputMarker + "=== RUN   TestX",
		"[    2.0] ublk: noise " + outputMarker + "--- PASS: TestX (0.00s)",
		kmsgMarker + "Linux version 6.12.1-test",
		statusMarker + "exit 0",
	} {
		r.consume(l, p)
	}
	assert.Equal(t, "6.12.1-test", r.Release)
	assert.Equal(t, 0, r.ExitCode)
	assert.Equal(t, []string{"Linux version 6.12.1-test"}, r.KernelLog)
	require.Len(t, got, 1)
	assert.Equal(t, Pass, got[0].Status)
}

func TestFindAssetsSaysHowToInstall(t *testing.T) {
	_, err := FindAssets(t.TempDir())
	require.Error(t, err)
	assert.Contains(t, err.Error(), ".ci/setup-ublk-vm")
}
