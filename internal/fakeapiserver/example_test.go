package fakeapiserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/drainkit/drainkit/internal/fakeapiserver"
)

// The double answers as the API server does for two deletions of its pod:
// the first, with 30 s, sets the deletionTimestamp; the second, shorter
// one (kubectl delete --grace-period=10) moves it back to the first's time
// plus 10 s. Tests hand Start the same handler for a kube.Config over TLS.
func ExamplePod() {
	api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv", UID: "uid-1"}
	api.SetGrace(60)
	srv := httptest.NewServer(api)
	defer srv.Close()

	read := func() corev1.Pod {
		resp, err := http.Get(srv.URL + "/api/v1/namespaces/agentenv/pods/sandboxd-0")
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		var pod corev1.Pod
		if err := json.NewDecoder(resp.Body).Decode(&pod); err != nil {
			panic(err)
		}
		return pod
	}
	deleted := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	api.Delete(deleted, 30*time.Second)
	pod := read()
	fmt.Println(pod.UID, *pod.Spec.TerminationGracePeriodSeconds, pod.DeletionTimestamp.UTC().Format(time.TimeOnly), *pod.DeletionGracePeriodSeconds)
	api.Delete(deleted.Add(5*time.Second), 10*time.Second)
	pod = read()
	fmt.Println(pod.DeletionTimestamp.UTC().Format(time.TimeOnly), *pod.DeletionGracePeriodSeconds, api.Reads())
	// Output:
	// uid-1 60 03:00:30 30
	// 03:00:10 10 2
}
