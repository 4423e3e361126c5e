package runsc

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// cgroupRoot is where runsc finds the cgroup hierarchies (v1: one directory each;
// v2: the unified one itself).
const cgroupRoot = "/sys/fs/cgroup"

// Forget removes root, the runsc state of containers whose processes are gone with the
// PID namespace that ran them (a pod's, its worker restarted in a new one), without
// running runsc, which would signal the PIDs that state records: numbers that mean other
// processes in any other namespace. It first removes the cgroups runsc put those
// containers in, when they are empty (rmdir, never recursive: a cgroup a process still
// holds stays). runsc makes one for each container, named by its ID at the root of every
// hierarchy for a spec with no cgroupsPath (WriteBundle's), and removes it only at
// `runsc delete`: forgotten with the state, it stayed for good, and a later container of
// the same ID (the restore of a checkpointed sandbox) found it there, took it for
// someone else's and left it at its own delete. A cgroup is removed when the state says
// runsc made it, or when it is runsc's default, named by the container's ID (one left so
// before). The error is the state's removal's alone: a cgroup that cannot be removed, or
// a state that cannot be read, leaves its cgroups as they were, as before; a server that
// failed to start for it would lose the sandboxes it was to restore.
func Forget(root string) error {
	states, _ := filepath.Glob(filepath.Join(root, "*.state")) // its one error: a bad pattern
	for _, path := range states {
		removeCgroupsOf(path)
	}
	if err := os.RemoveAll(root); err != nil {
		return fmt.Errorf("runsc: forgetting %s: %w", root, err)
	}
	return nil
}

// containerState is what Forget reads of a runsc state file: the container's ID and the
// cgroup runsc put its sandbox in (runsc's cgroup.CgroupJSON: v1's name, a parent per
// controller for a relative name, and which controllers it made; v2's mount point and
// path, and whether it made it).
type containerState struct {
	ID      string `json:"id"`
	Sandbox struct {
		Cgroup struct {
			V1 *struct {
				Name    string            `json:"name"`
				Parents map[string]string `json:"parents"`
				Own     map[string]bool   `json:"own"`
			} `json:"cgroupv1"`
			V2 *struct {
				Mountpoint string `json:"mountpoint"`
				Path       string `json:"path"`
				Own        bool   `json:"own"`
			} `json:"cgroupv2"`
		} `json:"cgroup"`
	} `json:"sandbox"`
}

// removeCgroupsOf removes the empty cgroups of the container whose runsc state is the
// file path that runsc made or named by its ID. A state it cannot read leaves them.
func removeCgroupsOf(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	var st containerState
	if json.Unmarshal(data, &st) != nil {
		return
	}
	byID := "/" + st.ID
	if v1 := st.Sandbox.Cgroup.V1; v1 != nil && !isRoot(v1.Name) {
		for controller, own := range v1.Own {
			if own || v1.Name == byID {
				removeEmptyCgroup(filepath.Join(cgroupRoot, controller, v1.Parents[controller], v1.Name))
			}
		}
	}
	if v2 := st.Sandbox.Cgroup.V2; v2 != nil && !isRoot(v2.Path) && (v2.Own || v2.Path == byID) {
		removeEmptyCgroup(filepath.Join(v2.Mountpoint, v2.Path))
	}
}

// isRoot reports whether name is no cgroup below a hierarchy's root but the root itself,
// which a state that names it never made.
func isRoot(name string) bool { return filepath.Clean("/"+name) == "/" }

// removeEmptyCgroup removes the cgroup directory dir if it is one below cgroupRoot (the
// state's words are not trusted to name another directory) and empty (rmdir: one a
// process still holds, another container of the same ID in another network namespace,
// fails EBUSY and stays).
func removeEmptyCgroup(dir string) {
	if strings.HasPrefix(dir, cgroupRoot+"/") {
		_ = os.Remove(dir)
	}
}
