package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

// lowest is the lowest port Addr picks: above the well-known and most
// registered service ports a machine may run.
const lowest = 10000

// rangeFile holds the kernel's ephemeral range, "LOW\tHIGH".
var rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Addr returns "127.0.0.1:PORT" for a port below the kernel's ephemeral
// range that was free when Addr bound it. It is not reserved: a caller that
// needs the port for itself should listen on it and keep the listener.
func Addr() (string, error) {
	high := ephemeralLow()
	if high <= lowest {
		return "", fmt.Errorf("freeport: the ephemeral range starts at %d, no room below it above %d", high, lowest)
	}
	var errs []error
	for range 64 {
		addr := fmt.Sprintf("127.0.0.1:%d", lowest+rand.IntN(high-lowest))
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return addr, ln.Close()
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("freeport: no free port below %d in 64 tries: %w", high, errors.Join(errs...))
}

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
