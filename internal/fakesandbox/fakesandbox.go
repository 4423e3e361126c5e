package fakesandbox

import "github.com/drainkit/drainkit/draintest"

// The fakes, under the names the repository's tests use.
type (
	// Sandbox is draintest.Sandbox.
	Sandbox = draintest.Sandbox
	// Node is draintest.Node.
	Node = draintest.Node
	// Fault is draintest.Fault.
	Fault = draintest.Fault
	// Disk is draintest.Disk.
	Disk = draintest.Disk
)

// The faults, as in draintest.
const (
	OK        = draintest.OK
	Transient = draintest.Transient
	Permanent = draintest.Permanent
	Plain     = draintest.Plain
	Hang      = draintest.Hang
	Panic     = draintest.Panic
	Vanish    = draintest.Vanish
)

// DefaultHang is draintest.DefaultHang.
const DefaultHang = draintest.DefaultHang

// The errors fake attempts return, as in draintest.
var (
	ErrTransient = draintest.ErrTransient
	ErrPermanent = draintest.ErrPermanent
	ErrHung      = draintest.ErrHung
)

// NewNode returns an empty Node.
func NewNode() *Node { return draintest.NewNode() }
