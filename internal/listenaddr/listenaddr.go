package listenaddr

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Check reports whether addr is a listen address, host:port: an IPv6 host
// in brackets ("[fd00::5]:8082"), as net.Listen wants it. A manifest's
// "$(POD_IP):8082" is none on an IPv6 pod (status.podIP "fd00::5" gives
// "fd00::5:8082"); "[$(POD_IP)]:8082" is one on every pod, Go taking a
// bracketed IPv4 address too. Its error reads after the flag and address
// it was given ("-listen fd00::5:8082 is not host:port: ...").
//
// The port is a number from 1 to 65535, 0 (any free port: a test's, a run by hand), or
// a service name the system knows ("http"): a port past 65535, negative or of an unknown
// name passed, and the program failed only at net.Listen, once it had started its
// children, with an error naming the flag and the port alone ("-listen: listen tcp:
// address 99999: invalid port", docs/faults.md row 1241).
func Check(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		if i := strings.LastIndex(addr, ":"); i >= 0 && net.ParseIP(addr[:i]) != nil && net.ParseIP(addr[:i]).To4() == nil {
			return fmt.Errorf("is not host:port: an IPv6 address goes in brackets, [%s]:PORT (in a manifest, \"[$(POD_IP)]:PORT\")", addr[:i])
		}
		return fmt.Errorf("is not host:port: %w", err)
	}
	if n, err := strconv.ParseInt(port, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if n < 0 || n > 65535 || err != nil {
			return fmt.Errorf("has port %s: a port is 1 to 65535 (0: any free one)", port)
		}
		return nil
	}
	if port == "" {
		return errors.New("has no port: give one, 1 to 65535 (0: any free one)")
	}
	// A name: the services database's (net.LookupPort reads it, no DNS), as net.Listen.
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("has port %q, a service name this system does not know: give a number, 1 to 65535", port)
	}
	return nil
}

// SamePort reports whether listeners on a and b, listen addresses
// (Check), would take the same port: the same one (a number or a service
// name, as net.Listen reads it), not 0, on the
// same host, or where one of them takes every address of the other's kind
// (an empty host or "::" every address, as Go listens there on both IPv4
// and IPv6; "0.0.0.0" every IPv4 address). Hosts named otherwise are told
// apart by name only: it never refuses listeners that do not collide.
//
// Both programs with a -listen and a -hook-listen (the supervisor, sandboxd) refuse
// such a pair with their flags: the second net.Listen would fail as if another process
// held the port ("bind: address already in use", exit 1), sending the operator to look
// for one on the node where two flags of one command line collide (docs/faults.md
// row 1186).
func SamePort(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil {
		return false
	}
	na, nb := portNumber(pa), portNumber(pb)
	if na != nb || na <= 0 {
		return false
	}
	every := func(h, other string) bool {
		ip, o := net.ParseIP(h), net.ParseIP(other)
		return h == "" || ip != nil && ip.Equal(net.IPv6unspecified) ||
			ip != nil && ip.Equal(net.IPv4zero) && o != nil && o.To4() != nil
	}
	return ha == hb || every(ha, hb) || every(hb, ha)
}

// portNumber is the port net.Listen takes port for, as Check takes it: a
// number (with leading zeros too) or a service name; -1 for none. Compared
// as text, ":http" and "127.0.0.1:80", or ":08082" and ":8082", were
// listeners that do not collide (docs/faults.md row 1493).
func portNumber(port string) int {
	if n, err := strconv.Atoi(port); err == nil {
		return n
	}
	if n, err := net.LookupPort("tcp", port); err == nil {
		return n
	}
	return -1
}

// Loopback reports whether addr's host is a loopback IP address or
// "localhost".
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// CheckSecret refuses a preStop hook secret, held by the variable env, that
// is one of those drainkit's manifests and docs ship for the reader to
// replace ("replace-me-with-a-long-random-secret", "the same secret"):
// they are public, so a hook guarded by one is guarded by nothing, and any
// sandbox that can reach the pod's address can take the node out of
// service. Its error names env and says how to make a secret.
//
// It also refuses a secret no hook can send, which a drain.HookGuard would
// compare every call against and refuse, at the drain instead of at start:
// one of white space alone (nothing is left once the white space at either
// end, which no header value carries, is set aside: an empty Secret's file
// of one newline), or one with a control character other than a tab inside
// (a Secret file of two lines), which no HTTP header can carry. The empty
// string is no secret, and passes.
func CheckSecret(env, secret string) error {
	trimmed := strings.TrimSpace(secret)
	if secret != "" && trimmed == "" {
		return fmt.Errorf("%s is white space alone (%q): no preStop hook can send it, and every call would be refused; "+
			"unset it (a loopback hook needs none) or set a random secret (openssl rand -hex 32)", env, secret)
	}
	for i := range len(trimmed) {
		if b := trimmed[i]; b < ' ' && b != '\t' || b == 0x7f {
			hint := ""
			if b == '\n' || b == '\r' {
				hint = " (a line break: a Secret of two lines?)"
			}
			return fmt.Errorf("%s: byte %d of %d is %#02x, a control character no HTTP header can carry%s: no preStop hook can send it, and every call would be refused",
				env, i+1, len(trimmed), b, hint)
		}
	}
	s := strings.ToLower(trimmed)
	if !strings.HasPrefix(s, "replace-me") && s != "the same secret" {
		return nil
	}
	return fmt.Errorf("%s is the manifest's placeholder %q, which anyone can read and send: set a random secret of your own (openssl rand -hex 32), here and in the preStop hook's httpHeaders",
		env, secret)
}
