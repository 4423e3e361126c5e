package kube_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/kube"
)

// kubectl delete --grace-period=30 on a pod whose manifest says an hour:
// the pod reads its deletionTimestamp, the budget's SIGKILL moves to it,
// and the drain's start is posted as an Event on the pod.
func Example() {
	// Stands in for the cluster: an API server on loopback holding the
	// pod, deleted at T0 with --grace-period=30, and the service account's
	// files. In a pod, kube.Config{} finds all of it.
	t0 := time.Now().Truncate(time.Second)
	api := startAPIServer("sandboxd-x7k2p", t0.Add(30*time.Second))
	defer api.Close()

	pod, err := kube.New("sandboxd-x7k2p", kube.Config{
		Host: api.URL, Namespace: "agentenv", TokenFile: api.tokenFile, CAFile: api.caFile,
	})
	if err != nil {
		fmt.Println(err) // out of a cluster: what is missing, by name
		return
	}
	budget, _ := deadline.New(3600*time.Second, deadline.Config{}) // the manifest's terminationGracePeriodSeconds

	// In the preStop handler:
	budget.OnPreStop(t0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	changed, err := pod.Tighten(ctx, budget)
	fmt.Println("tightened:", changed, err)
	fmt.Println("SIGKILL: T0 +", budget.Kill().Sub(t0))
	pod.Record(kube.Event{Reason: "DrainStarted", Note: "preserving 3 sandboxes, SIGKILL at T0+30s"})

	// Before the process exits:
	stats := pod.Flush(ctx)
	fmt.Printf("events: %d posted, %d dropped\n", stats.Posted, stats.Dropped)
	fmt.Println("the API server has:", <-api.reasons)
	// Output:
	// tightened: true <nil>
	// SIGKILL: T0 + 30s
	// events: 1 posted, 0 dropped
	// the API server has: DrainStarted
}

// exampleAPIServer is an API server on loopback with one deleted pod.
type exampleAPIServer struct {
	*httptest.Server
	dir, tokenFile, caFile string
	reasons                chan string
}

func startAPIServer(name string, deletion time.Time) *exampleAPIServer {
	pod, _ := json.Marshal(&corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "agentenv", UID: "1", DeletionTimestamp: &metav1.Time{Time: deletion}},
	})
	a := &exampleAPIServer{reasons: make(chan string, 1)}
	a.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			var ev struct{ Reason string }
			_ = json.NewDecoder(r.Body).Decode(&ev)
			a.reasons <- ev.Reason
			w.WriteHeader(http.StatusCreated)
			return
		}
		_, _ = w.Write(pod)
	}))
	a.dir, _ = os.MkdirTemp("", "kube-example")
	a.tokenFile, a.caFile = filepath.Join(a.dir, "token"), filepath.Join(a.dir, "ca.crt")
	_ = os.WriteFile(a.tokenFile, []byte(rand.Text()), 0o600)
	_ = os.WriteFile(a.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Certificate().Raw}), 0o600)
	return a
}

func (a *exampleAPIServer) Close() {
	a.Server.Close()
	_ = os.RemoveAll(a.dir)
}
