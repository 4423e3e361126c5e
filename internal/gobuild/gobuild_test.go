package gobuild

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The program is static: a pod image has no C library to load.
func TestProgramIsStatic(t *testing.T) {
	bin, err := Program(t.TempDir(), "github.com/drainkit/drainkit/internal/fakeublk/fakeublkd")
	require.NoError(t, err)
	assert.Equal(t, "fakeublkd", filepath.Base(bin))
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	assert.Nil(t, f.Section(".interp"), "no dynamic loader: built with CGO_ENABLED=0")
}

// CI's ahead build and the tests' builds must agree on the flags, or the
// ahead build compiles for nothing: GOFLAGS from the environment are kept.
func TestEnvKeepsTheCallersGOFLAGS(t *testing.T) {
	t.Setenv("GOFLAGS", "-gcflags=all=-dwarf=false")
	assert.Equal(t, []string{"CGO_ENABLED=0", "GOFLAGS=-gcflags=all=-dwarf=false -buildvcs=false"}, Env())
	t.Setenv("GOFLAGS", "")
	assert.Equal(t, []string{"CGO_ENABLED=0", "GOFLAGS=-buildvcs=false"}, Env())
}

func TestProgramNamesThePackageThatDoesNotBuild(t *testing.T) {
	_, err := Program(t.TempDir(), "./internal/no-such-package")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "go build ./internal/no-such-package")
	var exit *exec.ExitError
	assert.ErrorAs(t, err, &exit)
}
