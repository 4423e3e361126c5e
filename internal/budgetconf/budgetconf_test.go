package budgetconf_test

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/drainkit/drainkit/deadline"
	"github.com/drainkit/drainkit/internal/budgetconf"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A default margin reads as zero, whatever the budget's Margin in effect.
func Example() {
	b, _ := deadline.New(30*time.Second, deadline.Config{PreStopSleep: 5 * time.Second})
	margin, sleep := budgetconf.Of(b)
	fmt.Println("margin", margin, "sleep", sleep, "in effect", b.Margin())
	// Output: margin 0s sleep 5s in effect 3s
}
