//go:build linux

package main

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Fault: restoreRefused put its own status in place of the gate's refusal of a Restore
// of a sandbox paused here, and dropped the google.rpc.RetryInfo the gate's status
// carried (docs/faults.md row 2300): a client that reads RetryInfo (an e2b-style
// orchestrator) had no delay to wait before restoring it here, while the trailer
// grpc-retry-pushback-ms, set apart, still said 5000. The refusal now keeps the gate's
// details under its own words: the same wait in both hints.
func TestRestoreRefusedWhileDrainingKeepsTheGatesRetryInfo(t *testing.T) {
	t.Parallel()
	c, r := checkpointedWhileDraining(t)

	var trailer metadata.MD
	err := c.cc.Invoke(context.Background(), MethodRestore, &IDRequest{ID: r.ID}, new(SandboxReply), CallCodec(), grpc.Trailer(&trailer))
	st := status.Convert(err)
	require.Equal(t, codes.Unavailable, st.Code(), "%v", err)
	assert.Contains(t, st.Message(), "restore it here once the worker serves again", "the worker's words, not the gate's")
	require.Len(t, trailer.Get("grpc-retry-pushback-ms"), 1, "the gate's trailer")
	pushback, err := strconv.ParseInt(trailer.Get("grpc-retry-pushback-ms")[0], 10, 64)
	require.NoError(t, err)

	var infos []*errdetails.RetryInfo
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.RetryInfo); ok {
			infos = append(infos, info)
		}
	}
	require.Len(t, infos, 1, "before: no RetryInfo in %v", st.Proto())
	assert.Equal(t, pushback, infos[0].GetRetryDelay().AsDuration().Milliseconds(), "the wait the trailer asks")
}
