//go:build linux

package main

import (
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fault: row 2163's lock of -report is flock on FILE.lock beside it, which a
// supervisor opens to write, and one run as another user left it so (0600,
// its own): a supervisor whose pod's runAsUser changed (root to a user,
// the Report's directory on a hostPath writable by both), which had
// started and written its Report there, failed at start, exit 1, "-report
// R: state directory D: open R.lock: permission denied", a crash loop over
// a file its operator never made. A lock file this user cannot open is now
// said at WARN, as a file system that refuses flock is, and the start goes
// on. Real processes, the supervisor run as nobody:
//
//	a root supervisor's run left R.lock (0600, root's) beside R
//	a supervisor as nobody starts with -report R: before, exit 1 at once;
//	now ready, a WARN naming the lock file; SIGTERM: exit 0, its Report at R
func TestAReportLockAnotherUserLeftDoesNotStopTheStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs the supervisor as another user: needs root")
	}
	dir, err := os.MkdirTemp("", "supervisor-as-nobody-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "supervisor.test") // where nobody may run it
	copyFile(t, os.Args[0], bin, 0o755)
	reports := filepath.Join(dir, "reports")
	require.NoError(t, os.Mkdir(reports, 0o777))
	require.NoError(t, os.Chmod(reports, 0o777)) // the hostPath both users write in
	report := filepath.Join(reports, "report.json")
	require.NoError(t, os.WriteFile(report+".lock", []byte(`{"pid":7,"owner":"sandbox-node-old","since":"2026-12-01T00:00:00Z"}`+"\n"), 0o600))

	listen, api := freeAddr(t), freeAddr(t)
	argv := []string{bin, "helper:supervisor", "-hook-listen", freeAddr(t), "-listen", listen, "-server-url", "http://" + api,
		"-grace", "20s", "-report", report, "-termination-log", filepath.Join(reports, "termination-log"),
		"--", bin, "helper:stubserver", "-listen", api}
	cmd := helperCmd(argv)
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	require.NoError(t, err)
	defer stderr.Close()
	cmd.Stderr = io.MultiWriter(os.Stderr, stderr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	sup := startSupProc(t, cmd)
	ctx := t.Context()
	require.Eventually(t, func() bool { return get(ctx, "http://"+listen+"/healthz") == 200 }, 10*time.Second, 20*time.Millisecond,
		"ready: the lock file root left is no other supervisor")

	sup.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, sup.exitCode(t, 20*time.Second))
	assert.NotNil(t, readReport(t, report).Drain, "its account, at -report")
	assert.Contains(t, readFile(t, stderr.Name()), "level=WARN msg=\"supervisor: -report's lock file is not this user's to open")
}

// copyFile copies the file src to dst, made with perm.
func copyFile(t *testing.T, src, dst string, perm os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}
