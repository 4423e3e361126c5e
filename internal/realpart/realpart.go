package realpart

import (
	"os"
	"testing"
)

// Missing skips t, saying why, or fails it when the environment has CI=true.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why + " (CI=true: must not be skipped)")
	}
	t.Skip(why)
}
