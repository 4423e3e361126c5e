package httpsource

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakeagentenv"
)

// secretVolume is a Kubernetes Secret volume as the kubelet writes it: the
// file is a symlink through ..data to a timestamped directory, and an
// update swaps a new directory in by renaming a new ..data over the old.
type secretVolume struct {
	t   *testing.T
	dir string
	gen int
}

func (v *secretVolume) write(key string) {
	v.t.Helper()
	v.gen++
	ts := filepath.Join(v.dir, "..2026_12_04_0"+string(rune('0'+v.gen)))
	require.NoError(v.t, os.Mkdir(ts, 0o755))
	require.NoError(v.t, os.WriteFile(filepath.Join(ts, "api-key"), []byte(key+"\n"), 0o600))
	tmp := filepath.Join(v.dir, "..data_tmp")
	require.NoError(v.t, os.Symlink(filepath.Base(ts), tmp))
	require.NoError(v.t, os.Rename(tmp, filepath.Join(v.dir, "..data")))
	if v.gen == 1 {
		require.NoError(v.t, os.Symlink(filepath.Join("..data", "api-key"), filepath.Join(v.dir, "api-key")))
	}
}

// Fault (docs/faults.md row 236): the supervisor (and any Source given the
// key once) read its API key at start. A key rotated in the mounted
// Secret while it ran was never sent: at the drain, weeks later, every
// pause was refused 401 and every sandbox lost. Config.APIKeyFile is read
// again whenever the file changed.
func TestAPIKeyFileRotatedInASecretVolumeIsSent(t *testing.T) {
	srv, url, _ := agentenv(t, 1, fakeagentenv.Config{APIKey: "k1"})
	vol := &secretVolume{t: t, dir: t.TempDir()}
	vol.write("k1")
	var logs bytes.Buffer
	cfg := AgentENV()
	cfg.APIKeyFile, cfg.Logger = filepath.Join(vol.dir, "api-key"), slog.New(slog.NewTextHandler(&logs, nil))
	s, err := New(url, cfg)
	require.NoError(t, err)

	_, err = s.List(t.Context())
	require.NoError(t, err, "the first key")
	srv.SetAPIKey("k2")
	vol.write("k2")
	_, err = s.List(t.Context())
	require.NoError(t, err, "the rotated key")
	assert.Contains(t, logs.String(), `msg="httpsource: the API key file changed: the new key is sent"`)

	require.NoError(t, os.Remove(filepath.Join(vol.dir, "api-key")))
	_, err = s.List(t.Context())
	require.NoError(t, err, "the file gone: the last key")
	_, err = s.List(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(logs.String(), "the API key file could not be read again"), "once\n%s", logs.String())
}

// Bad key files are named at New.
func TestAPIKeyFileErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte(" \n"), 0o600))
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{APIKeyFile: filepath.Join(dir, "missing")}, "Config.APIKeyFile: open " + filepath.Join(dir, "missing")},
		{Config{APIKeyFile: empty}, "Config.APIKeyFile: " + empty + " is empty"},
		{Config{APIKeyFile: empty, APIKey: "k"}, "set Config.APIKey or Config.APIKeyFile"},
	} {
		_, err := New("http://127.0.0.1:1", tc.cfg)
		assert.ErrorContains(t, err, tc.want)
	}
}

// Fault: an API key with a byte an HTTP header cannot carry (a control
// character), was taken by New. Go's transport then refused every request
// before sending it ("invalid header field value"), an error without an
// answer, so transient: the readiness listing failed forever without the
// key-refused warning, and at the drain every pause was retried until the
// deadline, each sandbox lost. New now refuses such a key, naming the field
// or file and where the byte is, never the key; a key file read again that
// holds one keeps the last key, logged.
//
// Fault: the most common such key, the trailing newline of a Secret made
// from a file (DRAINKIT_API_KEY through a secretKeyRef, as both manifests
// give it), was then refused at start: a supervisor that could not start,
// where the key the server gets is the one without it (HTTP strips a
// header value's surrounding white space, and a server reading the same
// Secret, as AgentENV does, compares what arrives). Surrounding white
// space is now trimmed from APIKey, as from APIKeyFile's content.
func TestAPIKeyAHeaderCannotCarryIsRefusedAtNew(t *testing.T) {
	f := newFakeServer(1, func(f *fakeServer) { f.apiKey = "s3cret" })
	url := f.start(t)
	src, err := New(url, Config{APIKey: "s3cret\n"})
	require.NoError(t, err, "a trailing newline is the Secret's file's, not the key's")
	_, err = src.List(t.Context())
	require.NoError(t, err, "the key, trimmed")

	_, err = New(url, Config{APIKey: "s3\x7fcret"})
	assert.ErrorContains(t, err, "Config.APIKey")
	assert.ErrorContains(t, err, "byte 3 of 7")
	assert.NotContains(t, err.Error(), "s3cret", "the key is never shown")

	two := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(two, []byte("s3cret\nold\n"), 0o600))
	_, err = New(url, Config{APIKeyFile: two})
	assert.ErrorContains(t, err, "Config.APIKeyFile: "+two)
	assert.ErrorContains(t, err, "byte 7 of 10")
	assert.NotContains(t, err.Error(), "s3cret")

	vol := &secretVolume{t: t, dir: t.TempDir()}
	vol.write("s3cret")
	var logs bytes.Buffer
	src, err = New(url, Config{APIKeyFile: filepath.Join(vol.dir, "api-key"), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	vol.write("s3cret\nk2")
	_, err = src.List(t.Context())
	require.NoError(t, err, "the last key")
	assert.Contains(t, logs.String(), "the API key file could not be read again")
	assert.Contains(t, logs.String(), "byte 7 of 9")
}
