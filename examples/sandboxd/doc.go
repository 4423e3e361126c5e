// Command sandboxd is an AgentENV-style sandbox server wired with drainkit: an HTTP API to
// create, pause, resume and delete sandboxes (fake in-process ones, or real gVisor sandboxes
// through runsc), a state directory where paused sandboxes survive the process, and a node
// drain that fits the pod's termination grace period. See README.md for the HTTP contract.
//
// As PID 1 of a pod's PID namespace sandboxd runs under an init built in (internal/pid1):
// it forwards every signal to sandboxd and reaps the processes runsc leaves behind.
//
//	sandboxd -listen 127.0.0.1:8080 -state-dir /var/lib/sandboxd -grace 1h -concurrency 8
package main
