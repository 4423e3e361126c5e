package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// A client runs and checkpoints a sandbox over the worker's Unix socket; once the worker
// drains, Run is refused with Unavailable.
func Example() {
	dir, _ := os.MkdirTemp("", "worker")
	defer os.RemoveAll(dir)
	cfg := config{Socket: filepath.Join(dir, "w.sock"), StateDir: dir, Grace: 10 * time.Second,
		Concurrency: 2, Runtime: "fake", PauseLatency: 10 * time.Millisecond}
	w, err := newWorker(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, shutdown := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _, _ = w.serve(ctx); close(done) }()

	cc, _ := grpc.NewClient("unix://"+cfg.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer cc.Close()
	c := NewClient(cc)
	sb, _ := c.Run(context.Background(), &RunRequest{TimeoutS: 3600})
	fmt.Println("run:", sb.State)
	sb, _ = c.Checkpoint(context.Background(), sb.ID)
	fmt.Println("checkpoint:", sb.State)

	shutdown() // SIGTERM
	<-w.drainer.Gate().Draining()
	_, err = c.Run(context.Background(), &RunRequest{})
	fmt.Println("run while draining:", status.Code(err) == codes.Unavailable)
	<-done
	// Output:
	// run: running
	// checkpoint: paused
	// run while draining: true
}
