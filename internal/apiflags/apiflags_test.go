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

func parse(t *testing.T, args ...string) (*apiflags.Flags, string, error) {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var a apiflags.Flags
	a.Register(fs)
	require.NoError(t, fs.Parse(args))
	key, err := a.Finish(fs)
	return &a, key, err
}

func TestPresetWithTheShapeFlagsGivenOverridingItsFields(t *testing.T) {
	a, _, err := parse(t, "-api", "agentenv")
	require.NoError(t, err)
	assert.Equal(t, httpsource.AgentENV(), a.Config(), "the AgentENV preset alone")

	a, _, err = parse(t, "-api", "agentenv", "-list-path", "/v3/sandboxes", "-size-unit", "1024")
	require.NoError(t, err)
	want := httpsource.AgentENV()
	want.ListPath, want.SizeUnit = "/v3/sandboxes", 1024
	assert.Equal(t, want, a.Config(), "the preset, with the list path and size unit given")

	a, _, err = parse(t)
	require.NoError(t, err)
	assert.Equal(t, httpsource.Config{}, a.Config(), "generic: the zero Config, httpsource's defaults")

	a, _, err = parse(t, "-state-field", "", "-id-field", "uid", "-size-field", "mem", "-next-token", "x-next,page")
	require.NoError(t, err)
	assert.Equal(t, httpsource.Config{IDField: "uid", NoStateField: true, SizeField: "mem", SizeUnit: 1 << 20,
		PageTokenHeader: "x-next", PageTokenParam: "page"}, a.Config())
	assert.Equal(t, "http://127.0.0.1:8000", apiflags.DefaultServerURL[apiflags.AgentENV])
}

func TestAPIKeyFromFileOrEnvironment(t *testing.T) {
	t.Setenv(apiflags.EnvAPIKey, "from-env")
	a, key, err := parse(t)
	require.NoError(t, err)
	assert.Equal(t, "from-env", key)
	assert.Equal(t, apiflags.EnvAPIKey, a.KeySource())
	t.Setenv(apiflags.EnvAPIKey, "")
	a, _, err = parse(t)
	require.NoError(t, err)
	assert.Equal(t, "no key configured", a.KeySource())
	f := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(f, []byte(" from-file\n"), 0o600))
	a, key, err = parse(t, "-api-key-file", f)
	require.NoError(t, err)
	assert.Equal(t, "from-file", key, "the file wins, trimmed")
	assert.Equal(t, "-api-key-file "+f, a.KeySource())
}

func TestBadFlagsAreNamed(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"-api", "e2b"}, "-api must be generic or agentenv"},
		{[]string{"-next-token", "x-next"}, "-next-token must be HEADER,PARAM"},
		{[]string{"-size-unit", "0"}, "-size-unit must be positive"},
		{[]string{"-api-key-file", "/nonexistent/key"}, "-api-key-file"},
		{[]string{"-api-key-file", empty}, "is empty"},
	} {
		_, _, err := parse(t, tc.args...)
		require.Error(t, err, tc.args)
		assert.Contains(t, err.Error(), tc.says, tc.args)
	}
}
