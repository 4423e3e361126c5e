// Package lastreport writes the Report of a drain to the file that holds the last
// shutdown's, by the one rule sandboxd, the supervisor and the gVisor worker keep: no file
// there describes another drain.
//
// The file outlives the pod (a hostPath state directory, a -report volume) and is read
// after it (drainkit report, a person once the pod and its last state are gone). When a
// Report cannot be written (the file system full or read-only), the earlier shutdown's
// left in its place was read as this one's: "preserved 2" of a drain that lost both
// (docs/faults.md rows 1113, 1118, 1138). Write removes it instead, says so at ERROR, and
// on a full file system writes the Report once more in the space it freed (rows 1115,
// 1119):
//
//	data, err := json.MarshalIndent(rep, "", "  ")
//	if err == nil {
//		err = lastreport.Write(path, data, 0o600, logger)
//	}
//	// err != nil: no Report at path, this drain's or another's (unless the error says so)
//
// Written only at the drain's end, the Report was what a SIGKILL mid-drain (a restarted
// kubelet's orphan cleanup, the OOM killer) cut: the file then held the earlier drain's
// (docs/faults.md row 1510). A Progress keeps the drain's account there from its start,
// marked "unfinished", rewritten at each phase's end and at most once every Every as
// the node's counts change, until the final Report replaces it:
//
//	p := lastreport.Follow(&cfg, path, 0o600, logger, node) // before drain.New(cfg)
//	p.Start(d)
//	rep := d.Shutdown(ctx)
//	p.Stop() // the Report, written next, is the last
//	err = p.Finish(data) // Write's rule, but this drain's account stays when data cannot be written
//
// A Report that cannot be written leaves that account, not nothing: it is this drain's,
// said unfinished, and no earlier shutdown's (docs/faults.md row 1611). A SIGKILL in a
// write leaves its temporary file beside the file; Start removes those whose writer is
// gone, and no other server's write in progress (docs/faults.md row 1802).
package lastreport
