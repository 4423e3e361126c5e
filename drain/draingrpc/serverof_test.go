package draingrpc

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/drainkit/drainkit/drain"
)

// What a held Stop tells servers apart by (rows 2580 to 2585): grpc-go
// names, in each RPC's context, the *grpc.Server serving it, under a key
// learned from an RPC of drainkit's own (row 2660). This fails on a grpc
// update that stops doing so, or a Go that lays out its contexts
// otherwise, where Stop would fall back on the socket tables and their
// faults.
func TestServerOfNamesTheServerOfAnRPC(t *testing.T) {
	awaitServerKey(t.Context())
	require.NotNil(t, serverKey(), "no key of grpc's type serverKey in an RPC's context (grpc-go v1.85: Server.handleStream's contextWithServer): "+
		"a held Stop tells RPCs apart by the socket tables alone, rows 2580 to 2585's faults, and says so in its Step's detail (row 2661)")
	g := &drain.Gate{}
	a, b := serve(t, g, "tcp"), serve(t, g, "unix")
	for _, s := range []*server{a, b} {
		_, err := openStream(t, t.Context(), s.worker) // runs until its client closes it
		require.NoError(t, err)
	}

	var servers []*grpc.Server
	st := stateOf(g)
	st.mu.Lock()
	for c := range st.calls {
		servers = append(servers, serverOf(c.ctx))
	}
	st.mu.Unlock()
	assert.ElementsMatch(t, []*grpc.Server{a.srv, b.srv}, servers)
	assert.Nil(t, serverOf(context.Background()), "no RPC's context: no server")
}

// awaitServerKey starts learning serverKey, when no RPC did, and waits
// for it until ctx ends.
func awaitServerKey(ctx context.Context) {
	startLearning(ctx)
	select {
	case <-keyLearning.done:
	case <-ctx.Done():
	}
}
