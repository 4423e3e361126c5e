package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/drainkit/drainkit/internal/fakeublk"
)

func main() {
	if len(os.Args) < 2 {
		os.Exit(pause())
	}
	switch os.Args[1] {
	case "pause":
		os.Exit(pause())
	case "probe":
		os.Exit(probe(os.Args[2:]))
	case "server":
		os.Exit(server(os.Args[2:]))
	case "ublkd":
		if len(os.Args) != 3 {
			fmt.Fprintln(os.Stderr, "usage: podbin ublkd CONFIG_JSON")
			os.Exit(2)
		}
		var cfg fakeublk.DaemonConfig
		if err := json.Unmarshal([]byte(os.Args[2]), &cfg); err != nil {
			fmt.Fprintln(os.Stderr, "podbin ublkd:", err)
			os.Exit(2)
		}
		os.Exit(fakeublk.RunDaemon(cfg, os.Stdout))
	}
	fmt.Fprintln(os.Stderr, "podbin: unknown program", os.Args[1])
	os.Exit(2)
}

func probe(args []string) int {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8090", "HTTP address of GET /hook")
	events := fs.String("events", "", "file the events are appended to (required)")
	hook := fs.String("hook", "return", "the preStop hook: return, hang, or a duration to take")
	term := fs.String("term", "exit", "on SIGTERM: exit or ignore")
	fs.String("token", "", "an argument that identifies this process (unused)")
	if fs.Parse(args) != nil || *events == "" || (*term != "exit" && *term != "ignore") {
		fmt.Fprintln(os.Stderr, "probe: bad usage")
		return 2
	}
	var hookTakes time.Duration
	switch *hook {
	case "return":
	case "hang":
		hookTakes = -1
	default:
		d, err := time.ParseDuration(*hook)
		if err != nil || d < 0 {
			fmt.Fprintln(os.Stderr, "probe: -hook: want return, hang or a duration")
			return 2
		}
		hookTakes = d
	}
	f, err := os.OpenFile(*events, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 1
	}
	record := func(what string) { fmt.Fprintf(f, "%s %d\n", what, time.Now().UnixNano()) }
	// Listening before "ready": the tests delete the pod once it is ready, and the
	// kubelet's preStop GET /hook to an address not yet listening was refused (the hook
	// failed, SIGTERM came at once, and the timings measured no hook).
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 1
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hook", func(w http.ResponseWriter, r *http.Request) {
		record("hook")
		switch {
		case hookTakes < 0:
			// The kubelet never cancels it: the GET ends when the process
			// dies, or when the kubelet that made it does (a restart).
			<-r.Context().Done()
			record("hook-closed")
			return
		case hookTakes > 0:
			time.Sleep(hookTakes)
		}
		record("hook-end")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		err := srv.Serve(ln)
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}()
	record("ready") // the hook's address accepts connections
	for range sigs {
		record("term")
		if *term == "exit" {
			return 0
		}
	}
	return 0
}
