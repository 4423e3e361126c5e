package draintest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/drainkit/drainkit/pause"
)

// A Node is a fake sandbox server: a pause.Lister over its sandboxes that
// lists, in the order they were added, those neither preserved nor removed.
// It counts the preserves running at once. The zero value is an empty
// Node, ready to use, as is the one NewNode returns. Its methods are safe
// for concurrent use; its fields are not: set OnList and ListErr before
// the Run (a write during it is a data race that -race reports), and make
// them change what a listing does by its number.
type Node struct {
	// OnList, if set, is called at the start of every List with the
	// 1-based listing number, before the listing is taken; a test uses it
	// to add sandboxes between passes (a resume racing the shutdown).
	OnList func(n int)
	// ListErr, if set, is returned by the listings it returns non-nil for:
	// one that returns an error for n >= 3 is an API that went down during
	// the drain.
	ListErr func(n int) error

	mu        sync.Mutex
	sandboxes []*Sandbox // each once; a removed one has its removed flag set
	lists     int
	inFlight  int
	maxFlight int
}

// NewNode returns an empty Node.
func NewNode() *Node { return &Node{} }

// Add puts sandboxes on the node and returns them. One that Remove took
// off this node is put back (listed once, as before); one on it, preserved
// and not removed, is resumed (its user resumed it): listed again, its
// next preserve runs the next attempt in full; a new one whose ID a
// removed one had is a sandbox of its own, listed: Remove took the
// sandboxes then on the node, not their ID. A new one whose ID a sandbox
// preserved on the node has stands for that sandbox resumed: the Preserver
// preserves it again under the same Report entry (Relisted), not as a
// sandbox of its own, so AddN with a prefix in use resumes, it does not
// create; two not preserved with one ID are a listing's flaw the Report
// names. A nil sandbox panics, naming its index, before any is added.
func (n *Node) Add(sbs ...*Sandbox) []*Sandbox {
	for i, s := range sbs {
		if s == nil {
			panic(fmt.Sprintf("draintest: Node.Add: sandbox %d of %d is nil", i, len(sbs)))
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range sbs {
		if s.node == n { // on the node already: back on it, or resumed, not twice
			if !s.removed {
				s.resume()
			}
			s.removed = false
			continue
		}
		s.node, s.removed = n, false
		n.sandboxes = append(n.sandboxes, s)
	}
	return sbs
}

// AddN adds count sandboxes named prefix-0, prefix-1, ... whose preserve
// takes latency and which estimate it exactly, and returns them. A
// negative count panics, naming it.
func (n *Node) AddN(prefix string, count int, latency time.Duration) []*Sandbox {
	if count < 0 {
		panic(fmt.Sprintf("draintest: Node.AddN(%q): count must not be negative, got %d", prefix, count))
	}
	sbs := make([]*Sandbox, count)
	for i := range sbs {
		sbs[i] = &Sandbox{Name: fmt.Sprintf("%s-%d", prefix, i), Latency: latency, Estimate: latency}
	}
	return n.Add(sbs...)
}

// Remove takes the sandboxes with this ID that are on the node off it, as
// their user deleting them would: later listings leave them out, and a
// Preserve of one from then on, by a pass that listed it before, returns
// pause.ErrGone, as a runtime does for a sandbox that no longer exists
// (the Report counts it vanished). A sandbox added afterwards with the
// same ID is not removed (see Add).
func (n *Node) Remove(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range n.sandboxes {
		if s.Name == id {
			s.removed = true
		}
	}
}

// removeSandbox takes s alone off the node (a Vanish attempt).
func (n *Node) removeSandbox(s *Sandbox) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s.removed = true
}

// List implements pause.Lister.
func (n *Node) List(ctx context.Context) ([]pause.Sandbox, error) {
	n.mu.Lock()
	n.lists++
	count, hook, fail := n.lists, n.OnList, n.ListErr
	n.mu.Unlock()
	if hook != nil {
		hook(count)
	}
	if fail != nil {
		if err := fail(count); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]pause.Sandbox, 0, len(n.sandboxes))
	for _, s := range n.sandboxes {
		if !s.removed && !s.Preserved() {
			out = append(out, s)
		}
	}
	return out, nil
}

// Lists returns how many times List was called.
func (n *Node) Lists() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lists
}

// MaxInFlight returns the most preserves that ran at the same time.
func (n *Node) MaxInFlight() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.maxFlight
}

// InFlight returns how many preserves are running now.
func (n *Node) InFlight() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inFlight
}

// Sandboxes returns every sandbox ever added, removed ones included.
func (n *Node) Sandboxes() []*Sandbox {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Sandbox(nil), n.sandboxes...)
}

// isRemoved reports whether s, a sandbox of the node, was taken off it
// and not put back.
func (n *Node) isRemoved(s *Sandbox) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return s.removed
}

func (n *Node) enter() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.inFlight++
	n.maxFlight = max(n.maxFlight, n.inFlight)
}

func (n *Node) leave() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.inFlight--
}
