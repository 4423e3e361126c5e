package listening_test

import (
	"fmt"
	"net"
	"runtime"

	"github.com/drainkit/drainkit/internal/listening"
)

// A server's listener is found on its address until the server closes
// it: a stopped gRPC server's RPC came in on an address nobody listens on
// any more, another server's on one still listened on.
func ExampleOn() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	on, known := listening.On(ln.Addr())
	fmt.Println(on || runtime.GOOS != "linux", known || runtime.GOOS != "linux")
	ln.Close()
	on, _ = listening.On(ln.Addr())
	fmt.Println(on)
	// Output:
	// true true
	// false
}
