package pause

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The set finds every ID inserted, at its entry's index, tells an ID
// inserted twice, and grows past the size it was made for without losing
// any.
func TestIDSetFindsInsertsAndGrows(t *testing.T) {
	var s idSet
	s.reset(4) // made for 4, filled with 1000
	var entries []Entry
	for i := range 1000 {
		id := fmt.Sprint("sb-", i)
		j, dup := s.insert(id, 0, len(entries), entries)
		require.False(t, dup, id)
		require.Equal(t, i, j)
		entries = append(entries, Entry{ID: id})
	}
	assert.Equal(t, 1000, s.len())
	for i := range 1000 {
		j, ok := s.find(fmt.Sprint("sb-", i), entries)
		require.True(t, ok)
		require.Equal(t, i, j)
	}
	_, ok := s.find("sb-1000", entries)
	assert.False(t, ok)
	j, dup := s.insert("sb-500", 0, len(entries), entries)
	assert.True(t, dup)
	assert.Equal(t, 500, j)
	assert.Equal(t, 1000, s.len())

	var empty idSet
	_, ok = empty.find("sb-0", nil)
	assert.False(t, ok, "the zero set is empty")
}
