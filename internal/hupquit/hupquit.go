package hupquit

import (
	"bytes"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"
)

// Handle handles SIGHUP and SIGQUIT until the returned function is called: SIGHUP is
// logged and ignored, SIGQUIT logs every goroutine's stack (attribute "goroutines") and
// the program goes on. name is the program as the log lines call it ("sandboxd", "the
// worker"). stop undoes the handling and returns once Handle's goroutine has ended.
func Handle(logger *slog.Logger, name string) (stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGHUP, syscall.SIGQUIT)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					logger.Warn("SIGHUP ignored: " + name + " has nothing to reload; SIGTERM stops it")
					continue
				}
				var dump bytes.Buffer
				_ = pprof.Lookup("goroutine").WriteTo(&dump, 2)
				logger.Warn("SIGQUIT: goroutine dump; "+name+" goes on (SIGTERM stops it)", "goroutines", dump.String())
			}
		}
	})
	return func() {
		signal.Stop(sigs)
		close(done)
		wg.Wait()
	}
}
