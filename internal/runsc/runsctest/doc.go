// Package runsctest is what the tests of gVisor sandboxes share beyond internal/runsc:
// an images volume of their own (ImagesVolume), a tmpfs a test fills, makes read-only or
// runs out of inodes, where each test mounted, skipped and unmounted one itself. Linux
// only, as mount(2) and runsc are: elsewhere the package is this doc alone.
package runsctest
