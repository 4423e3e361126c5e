package httpsource

import (
	"encoding/json"

	"github.com/drainkit/drainkit/internal/listedstate"
	"github.com/drainkit/drainkit/pause"
)

// listed is the state a listing's element gave a sandbox: known is false
// when the element had none that is a string or number.
type listed struct {
	state string
	known bool
}

// listedState reads an element's state field, the one Config.StateField
// names with Config.NoStateField too: a listing of every sandbox still
// tells which state each is in (listedstate.Of).
func (s *Source) listedState(it map[string]json.RawMessage) listed {
	v, err := scalar(it[s.cfg.stateName])
	return listed{state: v, known: err == nil}
}

// The supervisor reads the state a listing of every sandbox gave each
// one, where it fetched the same listing again filtered on its side, with
// no exported name here (the public surface is capped).
func init() {
	listedstate.Of = func(sb pause.Sandbox) (string, bool) {
		switch b := sb.(type) {
		case *sandbox:
			return b.state.state, b.state.known
		case *sizedSandbox:
			return b.state.state, b.state.known
		}
		return "", false
	}
}
