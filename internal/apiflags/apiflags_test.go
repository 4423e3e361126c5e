package apiflags_test

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/apiflags"
	"github.com/drainkit/drainkit/pause/httpsource"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func parse(t *testing.T, args ...string) (*apiflags.Flags, error) {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var a apiflags.Flags
	a.Register(fs)
	require.NoError(t, fs.Parse(args))
	return &a, a.Finish(fs)
}

func TestPresetWithTheShapeFlagsGivenOverridingItsFields(t *testing.T) {
	a, err := parse(t, "-api", "agentenv")
	require.NoError(t, err)
	assert.Equal(t, httpsource.AgentENV(), a.Config(), "the AgentENV preset alone")

	a, err = parse(t, "-api", "agentenv", "-list-path", "/v3/sandboxes", "-size-unit", "1024")
	require.NoError(t, err)
	want := httpsource.AgentENV()
	want.ListPath, want.SizeUnit = "/v3/sandboxes", 1024
	assert.Equal(t, want, a.Config(), "the preset, with the list path and size unit given")

	a, err = parse(t)
	require.NoError(t, err)
	assert.Equal(t, httpsource.Config{}, a.Config(), "generic: the zero Config, httpsource's defaults")

	a, err = parse(t, "-state-field", "", "-id-field", "uid", "-size-field", "mem", "-next-token", "x-next,page")
	require.NoError(t, err)
	assert.Equal(t, httpsource.Config{IDField: "uid", NoStateField: true, SizeField: "mem", SizeUnit: 1 << 20,
		PageTokenHeader: "x-next", PageTokenParam: "page"}, a.Config())
	assert.Equal(t, "http://127.0.0.1:8000", apiflags.DefaultServerURL[apiflags.AgentENV])
}

func TestAPIKeyFromFileOrEnvironment(t *testing.T) {
	t.Setenv(apiflags.EnvAPIKey, "from-env")
	a, err := parse(t)
	require.NoError(t, err)
	assert.Equal(t, "from-env", a.Config().APIKey)
	assert.Equal(t, apiflags.EnvAPIKey, a.KeySource())
	t.Setenv(apiflags.EnvAPIKey, "")
	a, err = parse(t)
	require.NoError(t, err)
	assert.Equal(t, "no key configured", a.KeySource())
	t.Setenv(apiflags.EnvAPIKey, "from-env")
	f := filepath.Join(t.TempDir(), "key")
	a, err = parse(t, "-api-key-file", f)
	require.NoError(t, err)
	c := a.Config()
	assert.Equal(t, f, c.APIKeyFile, "the file wins")
	assert.Empty(t, c.APIKey)
	assert.Equal(t, "-api-key-file "+f, a.KeySource())
}

// The key file has one reader, httpsource.New: Finish does not read it, so
// no two reads at start can see two versions of a file being rotated. A
// missing or empty file still fails at start, naming the file, at New.
func TestKeyFileIsReadByTheSourceAlone(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte(" \n"), 0o600))
	for _, tc := range []struct{ file, says string }{
		{filepath.Join(dir, "missing"), "Config.APIKeyFile: open " + filepath.Join(dir, "missing") + ": no such file"},
		{empty, "Config.APIKeyFile: " + empty + " is empty"},
	} {
		a, err := parse(t, "-api-key-file", tc.file)
		require.NoError(t, err, "Finish leaves the file to New")
		_, err = httpsource.New(apiflags.DefaultServerURL[a.API], a.Config())
		assert.ErrorContains(t, err, tc.says)
	}
}

func TestBadFlagsAreNamed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"-api", "e2b"}, "-api must be generic or agentenv"},
		{[]string{"-next-token", "x-next"}, "-next-token must be HEADER,PARAM"},
		{[]string{"-size-unit", "0"}, "-size-unit must be positive"},
	} {
		_, err := parse(t, tc.args...)
		require.Error(t, err, tc.args)
		assert.Contains(t, err.Error(), tc.says, tc.args)
	}
}
