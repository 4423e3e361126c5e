package hupquit_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"

	"github.com/drainkit/drainkit/internal/hupquit"
)

// A SIGHUP to a server that handles it is logged, and the server goes on.
func Example() {
	r, w := io.Pipe()
	logger := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	stop := hupquit.Handle(logger, "sandboxd")
	defer stop()

	self, _ := os.FindProcess(os.Getpid())
	_ = self.Signal(syscall.SIGHUP)
	line, _ := bufio.NewReader(r).ReadString('\n')
	fmt.Print(line)
	fmt.Println("still serving")
	// Output:
	// level=WARN msg="SIGHUP ignored: sandboxd has nothing to reload; SIGTERM stops it"
	// still serving
}
