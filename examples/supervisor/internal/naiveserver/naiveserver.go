package naiveserver

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A Record is what a paused sandbox leaves in the state directory.
type Record struct {
	ID       string    `json:"id"`
	State    string    `json:"state"`
	PausedAt time.Time `json:"paused_at"`
}

// Sandbox states.
const (
	Running = "running"
	Pausing = "pausing"
	Paused  = "paused"
)

type server struct {
	stateDir string
	pause    time.Duration
	log      *log.Logger

	mu        sync.Mutex
	sandboxes map[string]string
	next      int
}

// Main runs the server with command-line args (without the program name)
// until SIGTERM or SIGINT, and returns the exit status. Flags:
//
//	-listen ADDR      where to serve the API (default 127.0.0.1:8080)
//	-state DIR        where paused sandboxes' records live (required)
//	-pause DURATION   how long one pause takes (default 500ms)
//	-daemon "CMD ARGS" a device daemon to start as a child and stop last
func Main(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("naiveserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "API address")
	state := fs.String("state", "", "state directory (required)")
	pause := fs.Duration("pause", 500*time.Millisecond, "time one pause takes")
	daemon := fs.String("daemon", "", "device daemon command to start as a child")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	lg := log.New(stderr, "naiveserver: ", log.Lmicroseconds)
	if *state == "" {
		lg.Print("-state is required")
		return 2
	}
	s := &server{stateDir: *state, pause: *pause, log: lg, sandboxes: map[string]string{}}
	if err := s.load(); err != nil {
		lg.Print(err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		lg.Print(err)
		return 1
	}
	var d *exec.Cmd
	if *daemon != "" {
		if d, err = startDaemon(*daemon); err != nil {
			lg.Print(err)
			return 1
		}
	}
	srv := &http.Server{Handler: s.routes()}
	go func() { _ = srv.Serve(ln) }()
	lg.Printf("serving on %s with %d paused sandboxes loaded", ln.Addr(), len(s.ids(Paused)))

	<-sigs
	lg.Print("SIGTERM: pausing running sandboxes one at a time")
	s.shutdown()
	if d != nil {
		lg.Print("stopping the device daemon")
		_ = d.Process.Signal(syscall.SIGTERM)
		_ = d.Wait()
	}
	_ = srv.Close()
	lg.Print("exiting")
	return 0
}

func startDaemon(command string) (*exec.Cmd, error) {
	f := strings.Fields(command)
	cmd := exec.Command(f[0], f[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd, cmd.Start()
}

// shutdown is the naive SIGTERM handler: one pause at a time, no deadline.
func (s *server) shutdown() {
	for _, id := range s.ids(Running) {
		if err := s.pauseOne(id); err != nil {
			s.log.Printf("pause %s: %v", id, err)
		}
	}
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes", s.handleList)
	mux.HandleFunc("POST /sandboxes", s.handleCreate)
	mux.HandleFunc("POST /sandboxes/{id}/pause", s.handlePause)
	mux.HandleFunc("POST /sandboxes/{id}/resume", s.handleResume)
	mux.HandleFunc("GET /prestop", s.handlePreStop)
	return mux
}

type item struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

func (s *server) handleList(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	out := make([]item, 0, len(s.sandboxes))
	for id, st := range s.sandboxes {
		out = append(out, item{id, st})
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (s *server) handleCreate(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	var id string
	for {
		s.next++
		id = fmt.Sprintf("sb-%d", s.next)
		if _, taken := s.sandboxes[id]; !taken {
			break
		}
	}
	s.sandboxes[id] = Running
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(item{id, Running})
}

func (s *server) handlePause(w http.ResponseWriter, r *http.Request) {
	switch err := s.pauseOne(r.PathValue("id")); {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, errNotFound):
		http.Error(w, err.Error(), http.StatusNotFound)
	case errors.Is(err, errConflict):
		http.Error(w, err.Error(), http.StatusConflict)
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func (s *server) handleResume(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.sandboxes[id] {
	case "":
		http.Error(w, "not found", http.StatusNotFound)
		return
	case Paused:
	default:
		http.Error(w, "not paused", http.StatusConflict)
		return
	}
	if err := os.Remove(s.recordPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s.sandboxes[id] = Running
	w.WriteHeader(http.StatusNoContent)
}

// handlePreStop is the naive preStop hook: it waits for every sandbox to
// stop running, however long that takes.
func (s *server) handlePreStop(w http.ResponseWriter, r *http.Request) {
	for len(s.ids(Running)) > 0 {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Fprintln(w, "drained")
}

var (
	errNotFound = errors.New("sandbox not found")
	errConflict = errors.New("sandbox is not running")
)

// pauseOne pauses a running sandbox: the pause takes s.pause, then its
// record is written and synced. It does not stop when the client goes
// away: a pause half done is worse than one finished late.
func (s *server) pauseOne(id string) error {
	s.mu.Lock()
	switch st, ok := s.sandboxes[id]; {
	case !ok:
		s.mu.Unlock()
		return errNotFound
	case st != Running:
		s.mu.Unlock()
		return errConflict
	}
	s.sandboxes[id] = Pausing
	s.mu.Unlock()

	time.Sleep(s.pause)
	rec := Record{ID: id, State: Paused, PausedAt: time.Now().UTC()}
	err := writeSynced(s.recordPath(id), rec)

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.sandboxes[id] = Running
		return err
	}
	s.sandboxes[id] = Paused
	return nil
}

func (s *server) recordPath(id string) string { return filepath.Join(s.stateDir, id+".json") }

func writeSynced(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// load reads every record in the state directory back as a paused sandbox.
func (s *server) load() error {
	if err := os.MkdirAll(s.stateDir, 0o755); err != nil {
		return err
	}
	recs, err := LoadRecords(s.stateDir)
	if err != nil {
		return err
	}
	for _, r := range recs {
		s.sandboxes[r.ID] = Paused
	}
	return nil
}

// LoadRecords returns the records in a state directory, sorted by ID.
func LoadRecords(dir string) ([]Record, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var r Record
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (s *server) ids(state string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, st := range s.sandboxes {
		if st == state {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// A Client drives a naive server's API, for tests. It keeps no idle
// connections, so it leaves no goroutines behind.
type Client struct {
	Base string
	http *http.Client
}

// NewClient returns a Client for the server whose API is at base.
func NewClient(base string) *Client {
	return &Client{Base: base, http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
}

// An Item is one element of the server's list.
type Item = item

// Create creates a running sandbox and returns its ID.
func (c *Client) Create(ctx context.Context) (string, error) {
	var it item
	err := c.do(ctx, http.MethodPost, "/sandboxes", http.StatusCreated, &it)
	return it.ID, err
}

// List returns every sandbox and its state, sorted by ID.
func (c *Client) List(ctx context.Context) ([]Item, error) {
	var out []item
	err := c.do(ctx, http.MethodGet, "/sandboxes", http.StatusOK, &out)
	return out, err
}

// States returns the sandboxes' states by ID.
func (c *Client) States(ctx context.Context) (map[string]string, error) {
	items, err := c.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(items))
	for _, it := range items {
		out[it.ID] = it.State
	}
	return out, nil
}

// Wait waits until the server answers its list, or ctx ends.
func (c *Client) Wait(ctx context.Context) error {
	for {
		_, err := c.List(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("naiveserver at %s not up: %w (last: %v)", c.Base, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *Client) do(ctx context.Context, method, path string, want int, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.Base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(into)
}
