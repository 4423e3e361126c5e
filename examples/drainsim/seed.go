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
	fs := flag.NewFlagSet("seed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "")
	dir := fs.String("state-dir", "", "")
	rtName := fs.String("runtime", "fake", "")
	latency := fs.Duration("pause-latency", 500*time.Millisecond, "")
	jitter := fs.Float64("pause-jitter", 0, "")
	idSeed := fs.Uint64("id-seed", 0, "")
	fs.Duration("grace", 0, "ignored: the seed does not know its grace period")
	fs.Int("concurrency", 1, "ignored: the seed pauses one at a time")
	devices := fs.Int("devices", 2, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if err := runSeed(*listen, *dir, *rtName, *latency, *jitter, *idSeed, *devices, logger); err != nil {
		logger.Error("seed", "error", err)
		return 1
	}
	return 0
}

func runSeed(listen, dir, rtName string, latency time.Duration, jitter float64, idSeed uint64, devices int, logger *slog.Logger) error {
	st, err := store.Open(filepath.Join(dir, "records"))
	if err != nil {
		return err
	}
	rt, err := sandbox.NewRuntime(rtName, dir, latency, jitter)
	if err != nil {
		return err
	}
	node, _, err := sandbox.NewNode(rt, st, logger)
	if err != nil {
		return err
	}
	defer node.Close()
	if idSeed != 0 {
		node.SeedIDs(idSeed) // as sandboxd does: the same sandboxes, the same pause latencies
	}
	daemon, sock, err := server.StartDeviceDaemon(context.Background(), dir, devices)
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
