package gobuild_test

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/drainkit/drainkit/internal/gobuild"
)

// A test builds the program it runs as a real process, then starts it.
func ExampleProgram() {
	dir, err := os.MkdirTemp("", "gobuild")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	bin, err := gobuild.Program(dir, "./internal/fakeublk/fakeublkd")
	if err != nil {
		fmt.Println(err)
		return
	}
	err = exec.Command(bin, "-no-such-flag").Run()
	fmt.Println("fakeublkd refuses a bad flag:", err != nil)
	// Output: fakeublkd refuses a bad flag: true
}
