package realkubelet

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/drainkit/drainkit/internal/gobuild"
)

// A Binary is one program of an image, as /Name: Package (a path relative
// to the module root, such as "./examples/sandboxd") built static, or File,
// a static executable of this host copied as it is (such as /usr/bin/runsc).
// Name may have a directory ("bin/busybox").
type Binary struct {
	Name    string
	Package string
	File    string
}

// An Image is a docker-archive tarball of one layer, ready for Start.
type Image struct {
	Ref  string // its reference, e.g. drainkit.local/e2e:v1
	Path string // the tarball
}

// ImageRef is the reference BuildImage gives its image.
const ImageRef = "drainkit.local/e2e:v1"

// BuildImage builds each binary with gobuild.Program (static, so the image
// needs nothing else; with the flags CI compiles them ahead with) and packs
// them into one image, ImageRef, whose entrypoint is /Name of the first
// binary. The tarball lives in a directory removed in t.Cleanup.
func BuildImage(t testing.TB, bins ...Binary) *Image {
	t.Helper()
	if len(bins) == 0 {
		t.Fatal("realkubelet: BuildImage needs a binary")
	}
	dir := t.TempDir()
	files := map[string]string{}
	start := time.Now()
	for _, b := range bins {
		if b.File != "" {
			files[b.Name] = b.File
			continue
		}
		out, err := gobuild.Program(t.TempDir(), b.Package)
		if err != nil {
			t.Fatalf("realkubelet: %v", err)
		}
		files[b.Name] = out
	}
	t.Logf("realkubelet: built %d binaries in %v", len(bins), time.Since(start).Round(time.Millisecond))
	img := &Image{Ref: ImageRef, Path: filepath.Join(dir, "image.tar")}
	if err := writeImage(img, "/"+bins[0].Name, bins, files); err != nil {
		t.Fatal(err)
	}
	return img
}

// writeImage writes a docker archive: manifest.json, the config JSON and
// one layer.tar with the binaries and the directories a container expects.
func writeImage(img *Image, entrypoint string, bins []Binary, files map[string]string) error {
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	mtime := time.Unix(0, 0)
	for _, d := range []string{"bin/", "tmp/", "etc/", "proc/", "sys/", "dev/", "state/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := lw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode, ModTime: mtime}); err != nil {
			return err
		}
	}
	for _, b := range bins {
		data, err := os.ReadFile(files[b.Name])
		if err != nil {
			return err
		}
		if err := lw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: b.Name, Mode: 0o755, Size: int64(len(data)), ModTime: mtime}); err != nil {
			return err
		}
		if _, err := lw.Write(data); err != nil {
			return err
		}
	}
	if err := lw.Close(); err != nil {
		return err
	}
	layerSum := sha256.Sum256(layer.Bytes())
	layerID := hex.EncodeToString(layerSum[:])
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      mtime.UTC().Format(time.RFC3339),
		"config": map[string]any{
			"Entrypoint": []string{entrypoint},
			"Env":        []string{"PATH=/"},
			"WorkingDir": "/",
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + layerID}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   configName,
		"RepoTags": []string{img.Ref},
		"Layers":   []string{layerID + "/layer.tar"},
	}})
	if err != nil {
		return err
	}

	f, err := os.Create(img.Path)
	if err != nil {
		return err
	}
	w := tar.NewWriter(f)
	entries := []struct {
		name string
		data []byte
	}{
		{layerID + "/layer.tar", layer.Bytes()},
		{configName, config},
		{"manifest.json", manifest},
	}
	if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: layerID + "/", Mode: 0o755, ModTime: mtime}); err != nil {
		f.Close()
		return err
	}
	for _, e := range entries {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.data)), ModTime: mtime}); err != nil {
			f.Close()
			return err
		}
		if _, err := io.Copy(w, bytes.NewReader(e.data)); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
