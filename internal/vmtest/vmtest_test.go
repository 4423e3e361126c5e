package vmtest

import (
	"bytes"
	"compress/gzip"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

func TestKernelProblemsFindsBugsWarningsAndHungTasks(t *testing.T) {
	log := []string{
		"Linux version 6.12.117+deb12-cloud-amd64",
		"ublk_drv: loading out-of-tree module taints kernel.",
		"BUG: kernel NULL pointer dereference, address: 0000000000000008",
		"WARNING: CPU: 0 PID: 42 at drivers/block/ublk_drv.c:1234 ublk_cancel_cmd+0x10/0x20",
		"INFO: task kworker/0:1:17 blocked for more than 120 seconds.",
		"Oops: 0002 [#1] PREEMPT SMP NOPTI",
	}
	assert.Equal(t, log[2:], KernelProblems(log))
	assert.Empty(t, KernelProblems(log[:2]))
}
