package proctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// nobody is the user and group a run not as root takes.
const nobody = 65534

// AsNobody returns a command that runs this test binary again with args as
// the user nobody, from "/", as a user who is not root would run it: the
// environment is this process's without CI (CI=true turns a skip for a
// missing part into a failure, and a run not as root is the case such a
// test checks), then env. The binary is copied where any user may run it;
// the copy goes at t's cleanup. The test must be root to start it.
func AsNobody(t testing.TB, args []string, env ...string) *exec.Cmd {
	t.Helper()
	dir, err := os.MkdirTemp("", "proctest-nobody-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	b, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	bin := filepath.Join(dir, filepath.Base(os.Args[0]))
	require.NoError(t, os.WriteFile(bin, b, 0o755))

	cmd := exec.Command(bin, args...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CI=") }), env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	return cmd
}
