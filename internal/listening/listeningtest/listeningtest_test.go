package listeningtest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Each name is odd as its key says, the paths share a short directory that
// the test's end removes, and the abstract name is the process's own.
func TestUnixNamesShownOtherwiseAreOddAsTheirKeysSay(t *testing.T) {
	var dir string
	t.Run("names", func(t *testing.T) {
		names := UnixNamesShownOtherwise(t, "first", "last")
		assert.Len(t, names, 3)
		assert.Contains(t, filepath.Base(names["space"]), " ")
		assert.Contains(t, filepath.Base(names["newline"]), "\n")
		dir = filepath.Dir(names["space"])
		assert.Equal(t, dir, filepath.Dir(names["newline"]))
		assert.DirExists(t, dir)
		assert.Less(t, len(names["newline"]), 108, "a socket's path has 108 bytes")
		assert.Equal(t, []string{"@first", strconv.Itoa(os.Getpid()), "last"}, strings.Split(names["abstract, with NULs"], "\x00"))
	})
	assert.NoDirExists(t, dir, "removed at the test's end")
}
