package logbuf

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Writers and a reader at once: run under -race, every line arrives whole.
func TestConcurrentWritersAndReader(t *testing.T) {
	var buf Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				log.Info("line", "writer", i, "n", j)
				_ = buf.String()
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 400 {
		t.Fatalf("got %d lines, want 400", len(lines))
	}
	for _, l := range lines {
		if !strings.Contains(l, "msg=line writer=") {
			t.Fatalf("torn line %q", l)
		}
	}
}

func ExampleBuffer() {
	var logs Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	log.Info("drain: preserved", "preserved", 20, "of", 20)
	fmt.Print(logs.String())
	// Output: level=INFO msg="drain: preserved" preserved=20 of=20
}

func TestSignalClosesOnceTheTextIsWritten(t *testing.T) {
	s := NewSignal("holders to close")
	log := slog.New(slog.NewTextHandler(s, nil))
	log.Info("ublk: stopping")
	select {
	case <-s.Seen():
		t.Fatal("seen before the line was written")
	default:
	}
	log.Info("ublk: waiting for the devices' holders to close")
	log.Info("ublk: waiting for the devices' holders to close") // again: closes once
	select {
	case <-s.Seen():
	default:
		t.Fatal("not seen after the line was written")
	}
}
