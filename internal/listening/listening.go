package listening

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"net"
	"os"
	"strconv"
	"strings"
)

// On reports whether a socket listens on addr: for a *net.TCPAddr, one on
// its port and its IP or the unspecified address (0.0.0.0, ::); for a
// *net.UnixAddr, one bound to its name. known is false when On cannot
// tell: another kind of address, a table it could not read, or a system
// without them; on is then false.
func On(addr net.Addr) (on, known bool) {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return onTCP(a)
	case *net.UnixAddr:
		return onUnix(a)
	}
	return false, false
}

// tcpListen is the state of a listening socket in /proc/net/tcp (TCP_LISTEN).
const tcpListen = "0A"

func onTCP(a *net.TCPAddr) (on, known bool) {
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		found, read := scan(table, func(f []string) bool {
			if len(f) < 4 || f[3] != tcpListen {
				return false
			}
			ip, port, ok := parseTCP(f[1])
			return ok && port == a.Port && (ip.IsUnspecified() || ip.Equal(a.IP))
		})
		if found {
			return true, true
		}
		known = known || read
	}
	return false, known
}

// parseTCP reads a local_address of /proc/net/tcp or tcp6: the IP in hex,
// each 32-bit word of it in the host's byte order, a colon, the port in
// hex.
func parseTCP(s string) (net.IP, int, bool) {
	h, p, ok := strings.Cut(s, ":")
	raw, err := hex.DecodeString(h)
	port, perr := strconv.ParseUint(p, 16, 16)
	if !ok || err != nil || perr != nil || len(raw) != net.IPv4len && len(raw) != net.IPv6len {
		return nil, 0, false
	}
	ip := make(net.IP, len(raw))
	for w := 0; w < len(raw); w += 4 {
		binary.BigEndian.PutUint32(ip[w:], binary.NativeEndian.Uint32(raw[w:]))
	}
	return ip, int(port), true
}

// acceptCon is __SO_ACCEPTCON in /proc/net/unix's Flags: the socket listens.
const acceptCon = 0x10000

func onUnix(a *net.UnixAddr) (on, known bool) {
	return scan("/proc/net/unix", func(f []string) bool {
		if len(f) < 8 {
			return false // unbound: no path
		}
		flags, err := strconv.ParseUint(f[3], 16, 32)
		return err == nil && flags&acceptCon != 0 && f[7] == a.Name
	})
}

// scan calls match with the fields of each line of table after its
// header, until it returns true; read says the table could be read.
func scan(table string, match func([]string) bool) (found, read bool) {
	f, err := os.Open(table)
	if err != nil {
		return false, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		if match(strings.Fields(sc.Text())) {
			return true, true
		}
	}
	return false, sc.Err() == nil
}
