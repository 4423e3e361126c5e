package freeport_test

import (
	"fmt"
	"net"

	"github.com/drainkit/drainkit/internal/freeport"
)

// A server started in another process gets an address it can bind.
func ExampleAddr() {
	addr, err := freeport.Addr()
	if err != nil {
		fmt.Println(err)
		return
	}
	ln, err := net.Listen("tcp", addr) // what the child process does with -listen addr
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	fmt.Println(ln.Addr().String() == addr)
	// Output: true
}
