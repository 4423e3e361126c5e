// Package store keeps the records of paused sandboxes in a directory so they survive the
// server's process: a sandbox paused during a node drain is resumed by the next server.
//
// A record that is half-written when the process dies must never come back as a good
// sandbox, so every record is written atomically (temporary file, fsync, rename, fsync of
// the directory) and carries its own length and SHA-256; Load reports every file that
// fails those checks instead of loading it. (internal/durable writes any other file the
// same way: the servers' shutdown Reports.)
//
//	st, err := store.Open(filepath.Join(stateDir, "sandboxes"))
//	recs, bad, err := st.Load() // at start: recs are paused sandboxes; log every bad one
//	err = st.Put(store.Record{ID: id, State: "paused", Image: dir}) // after the pause
//	err = st.Delete(id) // after a resume or delete
//
// Guarantees: after Put returns nil the record survives a crash or power loss (the file and
// the directory entry are synced); a crash during Put leaves either the old record or the
// new one, never a mix, and a leftover temporary file that Load reports as Incomplete.
// Store performs no blocking call other than file I/O.
package store
