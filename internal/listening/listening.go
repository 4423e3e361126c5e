package listening

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// On reports whether a socket listens on addr: for a *net.TCPAddr, one on
// its port and its IP or the unspecified address of a family that can
// take a connection to it (0.0.0.0 for an IPv4 address; :: for both, the
// table not saying whether the socket is IPv6-only); for a *net.UnixAddr,
// one bound to its name, spaces and newlines included, an abstract one
// ('@') with its NULs. known is false when On cannot tell: another kind
// of address, a table it could not read, a system without them, or an
// abstract name Go cut at a NUL (its name from getsockname ends there)
// that a listening socket's name goes on after; on is then false. The
// tables are those of the network namespace of the process's main
// thread (/proc/net is /proc/self/net), which need not be addr's.
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

// onTCP looks for a's listener in the table of each family that can
// accept a connection to a: an IPv4 socket (/proc/net/tcp) only one to an
// IPv4 address, an IPv6 one (tcp6) one to either, for a socket on :: that
// is not IPv6-only takes IPv4 connections too (the table does not say
// which it is).
func onTCP(a *net.TCPAddr) (on, known bool) {
	tables := []string{"/proc/net/tcp6"}
	if a.IP.To4() != nil {
		tables = append(tables, "/proc/net/tcp")
	}
	for _, table := range tables {
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

// unixRecord is the start of a line of /proc/net/unix, the kernel's
// "%pK: %08X %08X %08X %04X %02X %5lu" (Num, RefCount, Protocol, Flags,
// Type, St, Inode), then a space and the socket's name when it has one,
// written byte for byte: a space or a newline in a path is its own, and
// a line that does not start so goes on the name of the line before. (A
// name whose newline is followed by what reads as a record is read as two
// sockets: the table cannot tell them apart.)
var unixRecord = regexp.MustCompile(`^[0-9a-f]+: [0-9A-F]{8} [0-9A-F]{8} ([0-9A-F]{8}) [0-9A-F]{4} [0-9A-F]{2} +[0-9]+`)

func onUnix(a *net.UnixAddr) (on, known bool) {
	want := tableName(a.Name)
	ambiguous := false
	read := scanUnix(func(flags uint64, name string) bool {
		if flags&acceptCon == 0 {
			return false
		}
		if name == want {
			return true
		}
		// Go's name of an abstract socket ends at its first NUL, which the
		// table shows as '@': a name that goes on after it may be a's.
		ambiguous = ambiguous || strings.HasPrefix(want, "@") && strings.HasPrefix(name, want+"@")
		return false
	})
	switch {
	case read.found:
		return true, true
	case ambiguous:
		return false, false
	}
	return false, read.ok
}

// tableName is name as /proc/net/unix shows it: each NUL as '@' (an
// abstract name's first byte, which Go shows as '@' already, and any
// inside it).
func tableName(name string) string { return strings.ReplaceAll(name, "\x00", "@") }

type scanned struct{ found, ok bool }

// scanUnix calls match with the Flags and the name of each socket in
// /proc/net/unix, a name that spans lines whole, until it returns true.
func scanUnix(match func(flags uint64, name string) bool) scanned {
	data, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return scanned{}
	}
	_, body, _ := strings.Cut(string(data), "\n") // the header
	var flags uint64
	var name strings.Builder
	started := false
	// Each line read keeps its newline: a name's own stay, and the one
	// that ends its record goes.
	flush := func() bool { return started && match(flags, strings.TrimSuffix(name.String(), "\n")) }
	for line := range strings.Lines(body) {
		m := unixRecord.FindStringSubmatchIndex(line)
		if m == nil { // the rest of the name before, after a newline in it
			name.WriteString(line)
			continue
		}
		if flush() {
			return scanned{true, true}
		}
		started = true
		flags, _ = strconv.ParseUint(line[m[2]:m[3]], 16, 32)
		name.Reset()
		name.WriteString(strings.TrimPrefix(line[m[1]:], " "))
	}
	return scanned{flush(), true}
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
