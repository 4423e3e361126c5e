package pipenet

import (
	"context"
	"io"
	"net"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A connection Dial makes is the one Accept returns, in virtual time; a closed
// Listener refuses both.
func TestDialIsAccepted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := Listen("pipe")
		assert.Equal(t, "pipe", l.Addr().String())
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := l.Accept()
			assert.NoError(t, err)
			accepted <- c
		}()
		client, err := l.Dial(context.Background(), "tcp", "pipe:80")
		require.NoError(t, err)
		server := <-accepted
		go func() { _, _ = client.Write([]byte("hi")); client.Close() }()
		got, err := io.ReadAll(server)
		require.NoError(t, err)
		assert.Equal(t, "hi", string(got))
		server.Close()
		require.NoError(t, l.Close())
		_, err = l.Accept()
		assert.ErrorIs(t, err, net.ErrClosed)
		_, err = l.Dial(context.Background(), "tcp", "pipe:80")
		assert.ErrorIs(t, err, net.ErrClosed)
	})
}
