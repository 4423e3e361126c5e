package listenaddr_test

import (
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/internal/freeport"
	"github.com/drainkit/drainkit/internal/listenaddr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheckNamesTheBracketsAnIPv6AddressLacks(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:8082", "[10.0.0.5]:8082", "[fd00::5]:8082", ":8081", "localhost:80"} {
		assert.NoError(t, listenaddr.Check(ok), ok)
	}
	err := listenaddr.Check("fd00:10:244::5:8082")
	assert.ErrorContains(t, err, "an IPv6 address goes in brackets, [fd00:10:244::5]:PORT")
	err = listenaddr.Check("8082")
	assert.ErrorContains(t, err, "is not host:port: address 8082: missing port in address")
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8082": true, "[::1]:8082": true, "localhost:8082": true,
		"10.0.0.5:8082": false, ":8082": false, "[fd00::5]:8082": false, "no-port": false,
	} {
		assert.Equal(t, want, listenaddr.Loopback(addr), addr)
	}
}

func ExampleCheck() {
	fmt.Println(listenaddr.Check("[fd00::5]:8082"))
	fmt.Println("-hook-listen fd00::5:8082", listenaddr.Check("fd00::5:8082"))
	fmt.Println(listenaddr.Loopback("[::1]:8082"))
	// Output:
	// <nil>
	// -hook-listen fd00::5:8082 is not host:port: an IPv6 address goes in brackets, [fd00::5]:PORT (in a manifest, "[$(POD_IP)]:PORT")
	// true
}

func TestPlaceholder(t *testing.T) {
	for _, s := range []string{"replace-me-with-a-long-random-secret", "REPLACE-ME", " replace-me\n", "the same secret"} {
		assert.ErrorContains(t, listenaddr.CheckSecret("HOOK_SECRET", s), "HOOK_SECRET is the manifest's placeholder", "%q", s)
	}
	for _, s := range []string{"", "s3cret", "9f86d081884c7d659a2feaa0c55ad015", "please-replace-me"} {
		assert.NoError(t, listenaddr.CheckSecret("HOOK_SECRET", s), "%q", s)
	}
}

// Fault: a secret no hook can send (white space alone, a control character
// inside: a Secret file of one newline, or of two lines) passed, and every
// preStop call was refused by the HookGuard at the drain, not at start.
func TestSecretNoHookCanSendIsRefused(t *testing.T) {
	for s, want := range map[string]string{
		" \n":            `HOOK_SECRET is white space alone (" \n")`,
		"\n":             `HOOK_SECRET is white space alone ("\n")`,
		"line1\nline2\n": "HOOK_SECRET: byte 6 of 11 is 0x0a, a control character no HTTP header can carry (a line break: a Secret of two lines?)",
		"s3\x00zq9":      "HOOK_SECRET: byte 3 of 6 is 0x00, a control character",
	} {
		err := listenaddr.CheckSecret("HOOK_SECRET", s)
		assert.ErrorContains(t, err, want, "%q", s)
		if err != nil {
			assert.NotContains(t, err.Error(), "line2", "the secret is never shown")
			assert.NotContains(t, err.Error(), "zq9", "the secret is never shown")
		}
	}
	for _, s := range []string{"", "s3cret\n", "\ts3cret ", "s3\tcret"} {
		assert.NoError(t, listenaddr.CheckSecret("HOOK_SECRET", s), "%q", s)
	}
}

// Fault: a port outside 1-65535 (a typo's extra digit, ":99999"; a negative one; a
// service name the system does not know) passed Check, and the program failed only at
// net.Listen, after its start had begun, with an error naming the flag and the port
// alone. Check now refuses it, its error read after the flag and the address.
func TestCheckRefusesAPortNoListenerCanHave(t *testing.T) {
	for addr, want := range map[string]string{
		":99999":                   "has port 99999: a port is 1 to 65535 (0: any free one)",
		"127.0.0.1:65536":          "has port 65536",
		"[::1]:-1":                 "has port -1",
		":99999999999999999999999": "has port 99999999999999999999999",
		"10.0.0.5:":                "has no port",
		":no-such-service-here":    `has port "no-such-service-here", a service name this system does not know`,
	} {
		assert.ErrorContains(t, listenaddr.Check(addr), want, addr)
	}
	for _, ok := range []string{":1", ":65535", "127.0.0.1:0", "[::1]:8082"} {
		assert.NoError(t, listenaddr.Check(ok), ok)
	}
}

// Listeners that share a port on addresses that do not overlap are no collision.
func TestListenersOnOneEachOfTheirAddressesDoNotCollide(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{":8081", "[fd00::5]:8081", true},
		{"0.0.0.0:8081", "10.0.0.5:8081", true},
		{"[::]:8081", "10.0.0.5:8081", true},
		{"localhost:8081", "localhost:8081", true},
		{"0.0.0.0:8081", "[::1]:8081", false},
		{"127.0.0.1:8081", "10.0.0.5:8081", false},
		{"127.0.0.1:8081", "127.0.0.1:8082", false},
		{":0", ":0", false},
	} {
		assert.Equal(t, c.same, listenaddr.SamePort(c.a, c.b), "%s %s", c.a, c.b)
		assert.Equal(t, c.same, listenaddr.SamePort(c.b, c.a), "%s %s", c.b, c.a)
	}
}

// A port written two ways, as Check takes it (a service name, a number with a
// leading zero), is one port to net.Listen: the second listener fails with
// "address already in use". Fault: SamePort compared the ports' text, and
// took ":http" and "127.0.0.1:80", or "127.0.0.1:08082" and "127.0.0.1:8082",
// for listeners that do not collide: the program started and failed at its
// second listener, as if another process held the port (row 1186's fault).
func TestAPortWrittenTwoWaysIsOnePort(t *testing.T) {
	free, err := freeport.Addr()
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(free)
	require.NoError(t, err)
	padded := net.JoinHostPort(host, "0"+port)
	ln, err := net.Listen("tcp", free)
	require.NoError(t, err)
	defer ln.Close()
	_, err = net.Listen("tcp", padded)
	require.ErrorIs(t, err, syscall.EADDRINUSE, "net.Listen takes %s for %s", padded, free)
	assert.True(t, listenaddr.SamePort(free, padded), "%s %s", free, padded)
	assert.True(t, listenaddr.SamePort(padded, free), "%s %s", padded, free)

	http, err := net.LookupPort("tcp", "http")
	require.NoError(t, err)
	assert.True(t, listenaddr.SamePort(":http", "127.0.0.1:"+strconv.Itoa(http)))
	assert.True(t, listenaddr.SamePort("127.0.0.1:"+strconv.Itoa(http), ":http"))
	assert.False(t, listenaddr.SamePort(":http", ":https"))
}
