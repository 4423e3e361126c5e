// Package durable writes a file so that it survives a crash or a power cut
// whole: the new content or the old one, never a mix and never nothing.
//
//	if err := durable.WriteFile(path, data, 0o600); err != nil {
//		return fmt.Errorf("report not kept: %w", err)
//	}
//
// A file renamed into place is durable only once its directory is synced
// too; a rename alone can be undone by the journal after a power cut, and
// the process that wrote it never learns. So is a directory: MkdirAll
// makes the directories it creates durable, their entries included.
//
// A crash between a write's create and its rename leaves its temporary
// file, which no later write reuses; RemoveTemps removes them, called by a
// process that holds the lock every writer of the file takes. A write holds
// its temporary file's flock(2) from its create past its rename, so
// RemoveGoneTemps, needing no lock, removes only those whose writer is gone.
package durable
