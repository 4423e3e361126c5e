package drain

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/internal/fakesandbox"
)

// A hook address (or srv.Addr) no listener can have is refused by NewServer, naming the
// variable and the value, as every program's -listen is (listenaddr.Check,
// row 1241). Fault: only net.SplitHostPort looked at it, so ":99999" passed
// NewServer and Run failed at its listener ("listen tcp: address 99999:
// invalid port"), exit 2, once the server had started.
func TestNewServerRefusesAHookAddressNoListenerCanHave(t *testing.T) {
	srv := &http.Server{Addr: "127.0.0.1:0"}
	node := fakesandbox.NewNode()
	t.Setenv(EnvGrace, "30")
	t.Setenv(EnvHookSecret, "a-random-secret-0123456789abcdef") // ":99999" is no loopback
	for addr, want := range map[string]string{
		":99999":                 `drain: DRAINKIT_HOOK_LISTEN=":99999" has port 99999: a port is 1 to 65535`,
		"127.0.0.1:-1":           `drain: DRAINKIT_HOOK_LISTEN="127.0.0.1:-1" has port -1: a port is 1 to 65535`,
		"127.0.0.1:70000":        `drain: DRAINKIT_HOOK_LISTEN="127.0.0.1:70000" has port 70000`,
		"127.0.0.1:":             `drain: DRAINKIT_HOOK_LISTEN="127.0.0.1:" has no port`, // net.Listen: a random one, no kubelet's hook finds it
		"127.0.0.1:no-such-port": `drain: DRAINKIT_HOOK_LISTEN="127.0.0.1:no-such-port" has port "no-such-port", a service name this system does not know`,
		"fd00::5:8082":           `drain: DRAINKIT_HOOK_LISTEN="fd00::5:8082" is not host:port: an IPv6 address goes in brackets`,
	} {
		t.Run(addr, func(t *testing.T) {
			t.Setenv(EnvHookListen, addr)
			s, err := NewServer(srv, node)
			require.Error(t, err, "NewServer took it: Run would fail at its listener")
			assert.Nil(t, s)
			assert.ErrorContains(t, err, want)
		})
	}
	// srv.Addr the same: Run failed at its listener, exit 2.
	t.Setenv(EnvHookListen, "")
	for addr, want := range map[string]string{
		"127.0.0.1:99999": `drain: NewServer: srv.Addr "127.0.0.1:99999" has port 99999: a port is 1 to 65535`,
		"127.0.0.1:":      `drain: NewServer: srv.Addr "127.0.0.1:" has no port`,
	} {
		s, err := NewServer(&http.Server{Addr: addr}, node)
		assert.Nil(t, s, addr)
		assert.ErrorContains(t, err, want, addr)
	}
}

// srv.Addr and the hook's address on one port are refused by NewServer,
// naming both. Fault: NewServer took them, and Run's second listener
// failed with "bind: address already in use", exit 2, as if another
// process held the port, where the two addresses of one manifest collide.
func TestNewServerRefusesTheHookOnTheServersPort(t *testing.T) {
	node := fakesandbox.NewNode()
	t.Setenv(EnvGrace, "30")
	t.Setenv(EnvHookSecret, "a-random-secret-0123456789abcdef")
	for _, c := range []struct{ addr, hook string }{
		{":8082", ""}, // the hook's default, 127.0.0.1:8082, under srv's every address
		{"127.0.0.1:8082", "127.0.0.1:8082"},
		{"0.0.0.0:9000", "10.0.0.7:9000"},
	} {
		t.Setenv(EnvHookListen, c.hook)
		hook := c.hook
		if hook == "" {
			hook = defaultHookListen
		}
		s, err := NewServer(&http.Server{Addr: c.addr}, node)
		assert.Nil(t, s)
		assert.EqualError(t, err, `drain: NewServer: srv.Addr "`+c.addr+`" and DRAINKIT_HOOK_LISTEN="`+hook+`" take the same port: give the preStop hook a port of its own`)
	}
	// srv.Addr empty is ":http", as ListenAndServe listens: port 80 by its name.
	t.Setenv(EnvHookListen, "127.0.0.1:80")
	s, err := NewServer(&http.Server{}, node)
	assert.Nil(t, s)
	assert.EqualError(t, err, `drain: NewServer: srv.Addr ":http" and DRAINKIT_HOOK_LISTEN="127.0.0.1:80" take the same port: give the preStop hook a port of its own`)
	t.Setenv(EnvHookListen, "127.0.0.1:8082")
	s, err = NewServer(&http.Server{Addr: "10.0.0.7:8082"}, node) // one port, addresses apart
	require.NoError(t, err)
	s.releaseTerm() // never Run: SIGTERM's default action again
}
