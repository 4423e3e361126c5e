package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/examples/internal/sandbox"
	"github.com/drainkit/drainkit/examples/internal/store"
	"github.com/drainkit/drainkit/examples/sandboxd/server"
)

// seedMain is the seed: the same sandboxes, records and device daemon as sandboxd, shut down
// the way AgentENV did before drainkit. Its preStop hook (run by the kubelet, see seedHook)
// polls for zero running sandboxes with no bound; on SIGTERM it pauses the running sandboxes
// one at a time with no deadline, then asks the device daemon to stop and waits for it.
// It takes sandboxd's flags.
func seedMain(args []string, stderr io.Writer) int {
	var c seedConfig
	fs := flag.NewFlagSet("seed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "")
	fs.StringVar(&c.dir, "state-dir", "", "")
	fs.StringVar(&c.runtime, "runtime", "fake", "")
	fs.DurationVar(&c.latency, "pause-latency", 500*time.Millisecond, "")
	fs.Float64Var(&c.jitter, "pause-jitter", 0, "")
	fs.IntVar(&c.share, "pause-share", 0, "")
	fs.Uint64Var(&c.idSeed, "id-seed", 0, "")
	fs.Duration("grace", 0, "ignored: the seed does not know its grace period")
	fs.Int("concurrency", 1, "ignored: the seed pauses one at a time")
	fs.IntVar(&c.devices, "devices", 2, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if err := runSeed(c, logger); err != nil {
		logger.Error("seed", "error", err)
		return 1
	}
	return 0
}

// seedConfig is the seed's flags: sandboxd's that it uses.
type seedConfig struct {
	listen, dir, runtime string
	latency              time.Duration
	jitter               float64
	share                int    // -pause-share: fake pauses at full speed at once
	idSeed               uint64 // -id-seed: 0, random IDs
	devices              int
}

func runSeed(c seedConfig, logger *slog.Logger) error {
	listen, dir := c.listen, c.dir
	st, err := store.Open(filepath.Join(dir, "records"))
	if err != nil {
		return err
	}
	rt, err := sandbox.NewRuntime(c.runtime, dir, c.latency, c.jitter)
	if err != nil {
		return err
	}
	if f, ok := rt.(*sandbox.Fake); ok {
		f.SharePauses(c.share) // as sandboxd does: pauses cost the same in both runs
	}
	node, _, err := sandbox.NewNode(rt, st, logger)
	if err != nil {
		return err
	}
	defer node.Close()
	if c.idSeed != 0 {
		node.SeedIDs(c.idSeed) // as sandboxd does: the same sandboxes, the same pause latencies
	}
	daemon, sock, err := server.StartDeviceDaemon(context.Background(), dir, c.devices)
	if err != nil {
		return err
	}
	defer daemon.Close()

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: seedRoutes(node), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()

	<-sigs
	logger.Info("seed: SIGTERM, pausing running sandboxes one at a time")
	_ = srv.Close()
	sbs, _ := node.Running(context.Background())
	for _, sb := range sbs {
		if err := sb.Preserve(context.Background()); err != nil {
			logger.Warn("seed: pause failed", "id", sb.ID(), "error", err)
		}
	}
	logger.Info("seed: stopping the device daemon")
	if err := sock.RequestStop(context.Background()); err == nil {
		_ = sock.Wait(context.Background())
	}
	return nil
}

// seedRoutes is the part of sandboxd's HTTP contract the simulation uses, with no gate.
func seedRoutes(node *sandbox.Node) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			TimeoutS int `json:"timeout_s"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		info, err := node.Create(r.Context(), body.TimeoutS)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]string{"id": info.ID, "state": info.State})
	})
	mux.HandleFunc("GET /sandboxes", func(w http.ResponseWriter, _ *http.Request) {
		views := []map[string]string{}
		for _, info := range node.List() {
			views = append(views, map[string]string{"id": info.ID, "state": info.State})
		}
		_ = json.NewEncoder(w).Encode(views)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}
