package pause

import "hash/maphash"

// An idSet is the set of sandbox IDs a Run has seen, each with the index
// of its Report entry, which holds the ID and the pass that first listed
// it. It is an open-addressing table of 64-bit words (a hash tag and the
// index), so a large node's listing costs one hash and, mostly, one probe
// per ID, and the table holds no pointer for the garbage collector to
// scan: a map[string]int of 100k IDs cost a Run ~240 ns per sandbox.
type idSet struct {
	seed  maphash.Seed
	slots []uint64 // 0: empty; else tag<<32 | index+1
	n     int
	sink  uint64 // what prefetch loaded, kept so that its loads are made
}

func (s *idSet) len() int { return s.n }

// reset empties s and sizes it for n IDs: at most two thirds full. A
// table large enough already (one the Run before left, runSpare) is
// cleared and used again.
func (s *idSet) reset(n int) {
	if s.slots == nil {
		s.seed = maphash.MakeSeed()
	}
	if size := tableSize(n); cap(s.slots) >= size {
		s.slots = s.slots[:size]
		clear(s.slots)
	} else {
		s.slots = make([]uint64, size)
	}
	s.n = 0
}

// tableSize is the size of a table for n IDs: a power of two, at most two
// thirds full.
func tableSize(n int) int {
	size := 8
	for 2*size < 3*n {
		size *= 2
	}
	return size
}

// find returns the index of id's entry, reading the IDs from entries.
func (s *idSet) find(id string, entries []Entry) (int, bool) {
	if s.n == 0 {
		return 0, false
	}
	h := maphash.String(s.seed, id)
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		v := s.slots[i]
		if v == 0 {
			return 0, false
		}
		if v>>32 == h>>32 {
			if j := int(v&0xffffffff) - 1; entries[j].ID == id {
				return j, true
			}
		}
	}
}

// prefetch hashes the IDs of ids (elements with a flaw have none) and
// loads the slots they go to, so that their cache misses overlap; insert
// then finds the slots in the cache.
func (s *idSet) prefetch(ids []identity) {
	for i := range ids {
		if ids[i].flaw == "" {
			ids[i].hash = maphash.String(s.seed, ids[i].id)
		}
	}
	// Apart from the hashing, so that the loop is short enough for the
	// processor to have every load of the chunk in flight at once.
	mask := uint64(len(s.slots) - 1)
	var sink uint64
	for i := range ids {
		sink += s.slots[ids[i].hash&mask]
	}
	s.sink = sink
}

// insert adds id with the index its entry has (or is about to get) in
// entries, unless it is there already; it returns the index of id's entry
// and whether it was there. h is id's hash from prefetch, or 0: insert
// then computes it.
func (s *idSet) insert(id string, h uint64, index int, entries []Entry) (int, bool) {
	if s.slots == nil || 3*(s.n+1) > 2*len(s.slots) {
		s.grow(entries)
		h = 0 // the seed may be new
	}
	if h == 0 {
		h = maphash.String(s.seed, id)
	}
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		v := s.slots[i]
		if v == 0 {
			s.slots[i] = h>>32<<32 | uint64(index+1)
			s.n++
			return index, false
		}
		if v>>32 == h>>32 {
			if j := int(v&0xffffffff) - 1; entries[j].ID == id {
				return j, true
			}
		}
	}
}

// grow doubles the table (or makes it), rehashing the IDs from entries.
func (s *idSet) grow(entries []Entry) {
	old := s.slots
	if old == nil {
		s.seed = maphash.MakeSeed()
	}
	s.slots, s.n = make([]uint64, tableSize(max(s.n+1, len(old)))), 0 // a new table: old is read below
	mask := uint64(len(s.slots) - 1)
	for _, v := range old {
		if v == 0 {
			continue
		}
		h := maphash.String(s.seed, entries[int(v&0xffffffff)-1].ID)
		i := h & mask
		for s.slots[i] != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = h>>32<<32 | v&0xffffffff
		s.n++
	}
}
