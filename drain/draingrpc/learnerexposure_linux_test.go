package draingrpc

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/stats"

	"github.com/drainkit/drainkit/drain"
)

// Fault: the RPC that learns grpc's key (row 2660) was served on a
// loopback listener of its own that stayed open, accepting any local
// process's connection, until that RPC was answered: a tenant sharing the
// network namespace that called drainkit's method on it first, as on any
// loopback listener it finds, filled the one-key channel its handler sends
// the key on, and drainkit's own RPC then waited in its handler for ever.
// The key was never learned, every held Stop told its RPCs by the socket
// tables, and the listener stayed open for the process's life, open to
// every local connection. Loopback accepts a socket of this process as
// any other's, so the tenant's client is one of its own here.
//
//	every server           a stats handler that holds drainkit's RPC as it begins, until the tenant is done
//	a (tcp)                the user's first RPC starts the learning
//	a tenant               calls drainkit's method on every loopback listener that opened since:
//	                       before, one answers it; after, none is open
//	drainkit's RPC         goes on: before, its handler waits for ever; after, the key is learned
//
// It runs in a process of its own: the key is learned once per process,
// and the option is the process's.
func TestATenantOnLoopbackNeitherReachesNorHoldsTheLearning(t *testing.T) {
	if !inAProcessOfItsOwn(t) {
		return
	}
	hold := newHoldFirstProbe()
	withGlobalServerOptions(t, grpc.StatsHandler(hold))
	a := serve(t, &drain.Gate{}, "tcp")
	before := loopbackListeners(t)
	_, err := a.worker.EmptyCall(t.Context(), &testgrpc.Empty{})
	require.NoError(t, err, "the user's first RPC: starts the learning")

	hold.awaitBegun(t)
	var answered []string
	for addr := range loopbackListeners(t) {
		if !before[addr] && tenantCallsProbe(addr) == nil {
			answered = append(answered, addr)
		}
	}
	close(hold.release)
	assert.Empty(t, answered, "drainkit's method answered a tenant on loopback while the learning ran")
	awaitLearningEnd(t)
	require.NotNil(t, serverKey(), "the key learned from drainkit's own RPC")
}

// holdFirstProbe is a stats handler that holds the first RPC of drainkit's
// method as it begins, before it is answered, as a tracer's synchronous
// export to a collector that does not answer does: it closes begun and
// waits for release.
type holdFirstProbe struct {
	ignoreStats
	begun, release chan struct{}
	first          *atomic.Bool
}

func newHoldFirstProbe() holdFirstProbe {
	return holdFirstProbe{begun: make(chan struct{}), release: make(chan struct{}), first: new(atomic.Bool)}
}

// awaitBegun waits until drainkit's RPC is held.
func (h holdFirstProbe) awaitBegun(t *testing.T) {
	t.Helper()
	select {
	case <-h.begun:
	case <-time.After(10 * time.Second): // a hang guard: the learning starts with the RPC
		t.Fatal("drainkit's RPC never began, 10 s on")
	}
}

func (h holdFirstProbe) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if info.FullMethodName == probeFullMethod && h.first.CompareAndSwap(false, true) {
		close(h.begun)
		<-h.release
	}
	return ctx
}

// loopbackListeners returns the TCP sockets listening on 127.0.0.1 in the
// process's network namespace ("127.0.0.1:P"), as a tenant sharing it
// reads them from /proc/net/tcp.
func loopbackListeners(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open("/proc/self/net/tcp")
	require.NoError(t, err)
	defer f.Close()
	listeners := make(map[string]bool)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())       // sl local_address rem_address st ...
		if len(fields) < 4 || fields[3] != "0A" { // TCP_LISTEN
			continue
		}
		ip, hexPort, _ := strings.Cut(fields[1], ":")
		port, err := strconv.ParseUint(hexPort, 16, 16)
		if ip == "0100007F" && err == nil {
			listeners["127.0.0.1:"+strconv.FormatUint(port, 10)] = true
		}
	}
	require.NoError(t, sc.Err())
	return listeners
}

// tenantCallsProbe calls drainkit's method at addr as a gRPC client over
// HTTP/2 without TLS does, and reads its answer whole.
func tenantCallsProbe(addr string) error {
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &h2c}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a tenant gives up
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+probeFullMethod, bytes.NewReader(emptyMessage))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("TE", "trailers")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}
