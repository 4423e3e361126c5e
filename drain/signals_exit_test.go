package drain

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/fakesandbox"
	"github.com/drainkit/drainkit/internal/freeport"
	"github.com/drainkit/drainkit/internal/logbuf"
	"github.com/drainkit/drainkit/pause"
)

// Fault (row 1111): once HandleSignals or Server.Run returned, SIGTERM had its default
// action again, so the kubelet's SIGTERM sent again (a restarted kubelet runs the
// termination over; a runtime that sends the stop signal with every stop request) while
// the caller wrote its Report ended the process with status 143: the Report not written
// (or cut short) and, in a pod, a last state that says Error for a drain that went well.
// SIGTERM now stays caught until the process exits.
//
//	0        SIGTERM: the drain (2 sandboxes), HandleSignals or Run returns, "drained"
//	         the caller writes its Report to a FIFO nobody reads yet: it waits there
//	         SIGTERM again, then SIGWINCH, which the process acknowledges once the
//	         SIGTERM has come and gone
//	         before: the process ends by the SIGTERM (143), no Report
//	         the test reads the FIFO: the Report written, exit 0
//
// Real processes: this test binary, re-executed, drains and writes (reportAfterDrainProcess).
func TestSIGTERMAfterTheDrainDoesNotCutTheCallersReport(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes")
	}
	for _, mode := range []string{"handlesignals", "run"} {
		t.Run(mode, func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "report.json")
			require.NoError(t, syscall.Mkfifo(fifo, 0o600))
			addr, err := freeport.Addr()
			require.NoError(t, err)
			hook, err := freeport.Addr()
			require.NoError(t, err)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = e2eEnv(e2eRoleEnv+"=reportafter", "E2E_MODE="+mode, "E2E_REPORT="+fifo, "E2E_ADDR="+addr,
				EnvGrace+"=10", EnvHookListen+"="+hook, EnvHookSecret+"=")
			var stderr logbuf.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			lines := make(chan string, 16)
			exited := make(chan struct{})
			var waitErr error
			go func() {
				for sc := bufio.NewScanner(out); sc.Scan(); {
					lines <- sc.Text()
				}
				waitErr = cmd.Wait()
				close(exited)
			}()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})
			next := func(want string, send func()) {
				t.Helper()
				for {
					if send != nil {
						send()
					}
					select {
					case l := <-lines:
						if l == want {
							return
						}
					case <-exited:
						t.Fatalf("the process ended waiting for %q: %v\n%s", want, waitErr, &stderr)
					case <-time.After(50 * time.Millisecond):
					}
				}
			}
			next("ready", nil)
			// Until the drain has begun an early SIGTERM is the helper's guard's: again.
			next("drained", func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
			require.NoError(t, cmd.Process.Signal(syscall.SIGTERM), "the kubelet's again, as the Report is written")
			require.NoError(t, cmd.Process.Signal(syscall.SIGWINCH))
			select {
			case <-exited:
			case l := <-lines:
				require.Equal(t, "winch", l)
			}

			r, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0) // never waits for a writer that died
			require.NoError(t, err)
			defer r.Close()
			require.NoError(t, syscall.SetNonblock(int(r.Fd()), false))
			select {
			case <-exited:
				require.NoError(t, waitErr, "the process ended by the SIGTERM again, with no Report:\n%s", &stderr)
			case l := <-lines:
				require.Equal(t, "writing", l)
			}
			data, err := io.ReadAll(r)
			require.NoError(t, err)
			<-exited
			require.NoError(t, waitErr, "exit 0 after a drain that went well:\n%s", &stderr)
			var rep Report
			require.NoError(t, json.Unmarshal(data, &rep), "the whole Report: %s", data)
			assert.Equal(t, 2, rep.Preserve.Counts[pause.Preserved])
		})
	}
}

// reportAfterDrainProcess is the process of TestSIGTERMAfterTheDrainDoesNotCutTheCallersReport:
// two sandboxes drained by HandleSignals (mode "handlesignals") or Server.Run ("run") at
// SIGTERM, then the Report written to E2E_REPORT, a FIFO. It prints "ready" before it
// drains, "drained" after, "writing" once the FIFO is open, and "winch" at every SIGWINCH.
func reportAfterDrainProcess(mode string) int {
	guard := make(chan os.Signal, 16) // a SIGTERM before the drain registers is dropped, not fatal
	signal.Notify(guard, syscall.SIGTERM)
	winch := make(chan os.Signal, 4)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		for range winch {
			fmt.Println("winch")
		}
	}()
	node := fakesandbox.NewNode()
	node.AddN("sb", 2, 10*time.Millisecond)
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var d *Drainer
	var drain func() *Report
	code := 0
	switch mode {
	case "handlesignals":
		budget, err := deadline.New(10*time.Second, deadline.Config{})
		if err == nil {
			d, err = New(Config{Budget: budget, Sandboxes: node, Logger: logger})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		drain = func() *Report { return d.HandleSignals(context.Background()) }
	case "run":
		slog.SetDefault(logger)
		srv := &http.Server{Addr: os.Getenv("E2E_ADDR"), Handler: http.NewServeMux(), ReadHeaderTimeout: time.Second}
		s, err := NewServer(srv, pause.Lister(node))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		d = s.Drainer()
		drain = func() *Report {
			code = s.Run(context.Background())
			return d.Shutdown(context.Background()) // Run's Report, for the file
		}
	}
	unguarded := make(chan struct{})
	go func() {
		<-d.Terminating() // the drain's own registration has SIGTERM from here on
		signal.Stop(guard)
		close(unguarded)
	}()
	fmt.Println("ready")
	rep := drain()
	if code == 2 {
		return 2 // Run served nothing: no drain began
	}
	<-unguarded
	fmt.Println("drained")
	data, err := json.Marshal(rep)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	f, err := os.OpenFile(os.Getenv("E2E_REPORT"), os.O_WRONLY, 0) // waits for the test to read
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println("writing")
	if _, err := f.Write(data); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if rep.Err() != nil {
		return 1
	}
	return code
}
