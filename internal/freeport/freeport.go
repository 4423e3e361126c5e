package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
)

// lowest is the lowest port Addr picks: above the well-known and most
// registered service ports a machine may run.
const lowest = 10000

// rangeFile holds the kernel's ephemeral range, "LOW\tHIGH".
var rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Addr returns "127.0.0.1:PORT" for a port below the kernel's ephemeral
// range that was free when Addr bound it, and that no earlier call in this
// process returned: two servers' addresses asked for one after the other
// (a -listen and a -hook-listen) are never one port. It is not reserved: a
// caller that needs the port for itself should listen on it and keep the
// listener.
func Addr() (string, error) {
	high := ephemeralLow()
	if high <= lowest {
		return "", fmt.Errorf("freeport: the ephemeral range starts at %d, no room below it above %d", high, lowest)
	}
	mu.Lock()
	defer mu.Unlock()
	var errs []error
	n := high - lowest
	start := rand.IntN(n)
	for i := 0; i < n && len(errs) < 64; i++ {
		port := lowest + (start+i)%n
		if handed[port] {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			handed[port] = true
			return addr, ln.Close()
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("freeport: no free port below %d not handed out already: %w", high, errors.Join(errs...))
}

// handed holds the ports Addr returned in this process, under mu: picked
// at random twice, one port went to a server's -listen and its
// -hook-listen both (a clean clone's CI run, drainsim: sandboxd refused
// the pair, exit 2), about once in 22,768 pairs.
var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// ephemeralLow is where the kernel's ephemeral range starts (32768 when it
// cannot be read: Linux's default).
func ephemeralLow() int {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return 32768
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil || low <= 0 {
		return 32768
	}
	return low
}
