package runsc

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Forget removes the state whatever its words, and never a directory they name outside
// the cgroup hierarchies, nor a hierarchy's root. (The real cgroups runsc leaves, and
// their removal: TestCgroupsOfAnotherPIDNamespacesSandboxesGoWithItsState in
// examples/internal/sandbox.)
func TestForgetRemovesTheStateAndNoDirectoryOutsideTheCgroups(t *testing.T) {
	outside := t.TempDir() // empty: removable, were the state's words taken
	root := filepath.Join(t.TempDir(), "pidns-1")
	require.NoError(t, os.MkdirAll(root, 0o700))
	states := map[string]string{
		"a_sandbox:a.state": `{"id":"a","sandbox":{"cgroup":{"cgroupv1":{"name":"/../../../..` + outside + `","own":{"pids":true}}}}}`,
		"b_sandbox:b.state": `{"id":"b","sandbox":{"cgroup":{"cgroupv2":{"mountpoint":"/sys/fs/cgroup","path":"/","own":true}}}}`,
		"c_sandbox:c.state": `not json`,
		"d_sandbox:d.state": `{"id":"d","sandbox":{}}`, // --ignore-cgroups: none made
	}
	for name, content := range states {
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(content), 0o600))
	}

	require.NoError(t, Forget(root), "the state is forgotten whatever its words")
	assert.DirExists(t, outside, "a directory outside the cgroup hierarchies is left")
	assert.DirExists(t, "/sys/fs/cgroup")
	assert.NoDirExists(t, root, "the state is forgotten")
	assert.NoError(t, Forget(root), "a state already gone is forgotten")
}
