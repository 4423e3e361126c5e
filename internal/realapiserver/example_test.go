package realapiserver_test

import (
	"fmt"
	"path/filepath"

	"github.com/drainkit/drainkit/internal/realapiserver"
)

// The binary's default place, .ci/build-kube-apiserver's cache, is per
// release: its directory names the Version the tests pin, so a binary of
// another release, cached before, is not the one they run.
func ExampleDefaultAPIServer() {
	bin := realapiserver.DefaultAPIServer()
	fmt.Println(filepath.Base(filepath.Dir(bin)), filepath.Base(bin))
	// Output: kube-apiserver-v1.34.4 kube-apiserver
}
