package sandbox

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A remainsLister is a Runtime that can say which sandboxes it holds something of on
// disk (an image, a bundle), by ID.
type remainsLister interface {
	remains() []string
}

// remains returns the IDs of the sandboxes whose image is in Dir (ID.img): written by a
// Pause, removed by a failed one, a Destroy or, once the record is gone, DropImage.
func (f *Fake) remains() []string {
	var ids []string
	for _, name := range entries(f.Dir) {
		if id, ok := strings.CutSuffix(name, ".img"); ok && id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// remains returns the IDs of the sandboxes with an image directory or a bundle under Dir.
func (r *Runsc) remains() []string {
	return append(entries(filepath.Dir(r.Image("x"))), entries(filepath.Dir(r.Bundle("x").Dir))...)
}

// entries returns the names in dir that do not begin with a dot (a temporary file of a
// write in flight, or cut: durable.WriteFile's); none when dir cannot be read.
func entries(dir string) []string {
	list, _ := os.ReadDir(dir)
	var names []string
	for _, e := range list {
		if !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	return names
}

// SweepOrphans destroys (the runtime's Destroy) what the runtime holds on disk of
// sandboxes the node does not list and no record file in recordsDir names: what a pause
// cut by SIGKILL left (the record is written only once the pause is done: the fake's
// image, written first; a checkpoint image half written by runsc, as large as its
// sandbox's memory), and the bundles of sandboxes lost running with their server. No
// server knows them, and they stayed on the state directory, a hostPath, for ever. A
// sandbox with a record file of any kind (a damaged or unfinished one, which NewNode
// reported and skipped) keeps everything, for a person to look at; so does every sandbox
// when recordsDir cannot be listed, which is logged. What it removes is logged at INFO on
// logger (nil: the node's), what it could not at WARN. Call it once NewNode has loaded
// the records, before any Create, holding the state directory's lock: a sandbox being
// created or paused by another server would be taken for an orphan.
func (n *Node) SweepOrphans(recordsDir string, logger *slog.Logger) {
	if logger == nil {
		logger = n.logger
	}
	if _, ok := n.rt.(remainsLister); !ok {
		return
	}
	orphans, err := n.orphans(recordsDir)
	if err != nil {
		// Read as no records, every image of a damaged record NewNode kept would be
		// taken for an orphan.
		logger.Warn("the records could not be listed: no sweep of what sandboxes without a record left, nothing removed",
			"dir", recordsDir, "error", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for id := range orphans {
		if n.stillCheckpointing(id) {
			continue // AdoptCheckpoints said so
		}
		if err := n.rt.Destroy(ctx, id); err != nil {
			logger.Warn("what a sandbox without a record left could not be removed", "id", id, "error", err)
			continue
		}
		logger.Info("removed what a sandbox without a record left (a pause cut short, or lost running)", "id", id)
	}
}

// orphans returns the sandboxes the runtime holds something of on disk that the node
// does not list and no record file in recordsDir names; none, with the error, when
// recordsDir cannot be listed.
func (n *Node) orphans(recordsDir string) (map[string]bool, error) {
	rl, ok := n.rt.(remainsLister)
	if !ok {
		return nil, nil
	}
	records, err := os.ReadDir(recordsDir) // the store made it: missing, it is not the store's
	if err != nil {
		return nil, err
	}
	hasRecordFile := func(id string) bool {
		for _, r := range records {
			if name := r.Name(); strings.HasPrefix(name, id+".") || strings.HasPrefix(name, "."+id+".") {
				return true
			}
		}
		return false
	}
	n.mu.Lock()
	orphans := map[string]bool{}
	for _, id := range rl.remains() {
		if _, listed := n.sbs[id]; !listed && !hasRecordFile(id) {
			orphans[id] = true
		}
	}
	n.mu.Unlock()
	return orphans, nil
}

// stillCheckpointing reports whether AdoptCheckpoints left sandbox id, its checkpoint
// still running.
func (n *Node) stillCheckpointing(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.checkpointing[id]
}
