package deadline

import (
	"time"

	"github.com/drainkit/drainkit/internal/nodeend"
)

// The drain tells a budget the node's end under the kubelet's own
// termination through internal/nodeend: no exported name here.
func init() {
	nodeend.Set = func(budget any, end time.Time) bool { return budget.(*Budget).endAt(end) }
}
