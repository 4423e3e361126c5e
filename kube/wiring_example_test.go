package kube_test

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/kube"
)

// The package documentation's wiring, in a pod: the zero Config reads the
// service account's token, CA and namespace. (Compiled, not run: it needs
// a cluster; Example runs the same calls against a loopback API server.)
func Example_inCluster() {
	ctx := context.Background()
	budget, err := deadline.New(3600*time.Second, deadline.Config{})
	if err != nil {
		log.Fatal(err)
	}
	budget.OnPreStop(time.Now())

	pod, err := kube.New(os.Getenv("POD_NAME"), kube.Config{}) // in-cluster; Downward API
	if err != nil {
		log.Print("no API access; the manifest's grace stands: ", err)
	}
	// In the preStop handler, after budget.OnPreStop:
	read, cancel := context.WithTimeout(ctx, 2*time.Second)
	changed, err := pod.Tighten(read, budget) // ErrNotTerminating under node shutdown
	cancel()
	pod.Record(kube.Event{Reason: "DrainStarted", Note: "3 sandboxes to preserve"})
	// Before exiting, a bound of its own (the read's has long passed):
	flush, cancel := context.WithTimeout(ctx, time.Second)
	stats := pod.Flush(flush) // posted and dropped events
	cancel()

	log.Print("grace cut by the deletion: ", changed, " ", err, "; events: ", stats.Posted, " posted, ", stats.Dropped, " dropped")
}
