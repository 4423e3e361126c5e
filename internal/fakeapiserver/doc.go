// Package fakeapiserver starts a stand-in for a Kubernetes API server on
// loopback, for the tests of package kube and of drain.Config.Pod: a TLS
// server with its own certificate, a handler the test writes, and the
// service account's files (token, CA) that a kube.Config reads to reach it,
// as a pod reads them from /var/run/secrets.
//
//	srv, cfg := fakeapiserver.Start(t, handler, "agentenv", "token-1")
//	pod, err := kube.New("sandboxd-0", cfg) // talks to handler over TLS, trusting srv's certificate
//
// Pod is the handler of an API server holding one pod and taking the Events
// posted on it, for a test of a server that reads its pod (drain's, the
// supervisor's, realkubelet's):
//
//	api := &fakeapiserver.Pod{Name: "sandboxd-0", Namespace: "agentenv"}
//	_, cfg := fakeapiserver.Start(t, api, "agentenv", "token-1")
//	api.SetDeletion(kill) // kubectl delete: the pod's deletionTimestamp
//
// internal/realapiserver runs the real kube-apiserver instead, to prove the
// same code against what a cluster answers.
package fakeapiserver
