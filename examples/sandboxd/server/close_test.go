package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/internal/logbuf"
)

// Fault: with -runtime runsc, Close force-deletes the sandboxes that were not preserved,
// and dropped the error of every `runsc delete -force` that failed: a sandbox left
// running, or its container kept in runsc's state, with no word of it. Each failure is
// now an ERROR line naming the sandbox.
func TestCloseSaysWhichUnpreservedSandboxItCouldNotDelete(t *testing.T) {
	cfg := runscConfig(t)
	var logs logbuf.Buffer
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	rs := s.rt.(*sandbox.Runsc)
	binary := rs.Runtime.Binary
	t.Cleanup(func() {
		rs.Runtime.Binary = binary
		_ = rs.Runtime.DeleteAll(context.Background())
	})
	info, err := s.Node().Create(context.Background(), 3600)
	require.NoError(t, err)
	// Every runsc delete fails, as one the kernel or the runtime refuses does.
	fails := filepath.Join(t.TempDir(), "runsc")
	require.NoError(t, os.WriteFile(fails, []byte("#!/bin/sh\necho 'runsc delete refused (injected)' >&2\nexit 1\n"), 0o700))
	rs.Runtime.Binary = fails

	s.Close()
	assert.Regexp(t, `level=ERROR msg="[^"]*not preserved[^"]*" id=`+info.ID+` .*injected`, logs.String())
}
