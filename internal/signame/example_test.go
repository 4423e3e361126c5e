package signame_test

import (
	"fmt"
	"os"
	"syscall"

	"github.com/drainkit/drainkit/internal/signame"
)

func Example() {
	fmt.Println(signame.Name(syscall.SIGTERM), signame.Name(os.Interrupt), syscall.SIGTERM)
	// Output: SIGTERM SIGINT terminated
}
