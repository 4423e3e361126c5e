package doccheck

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// A ```yaml block of the Markdown whose first line is a comment naming a
// file of the repository ("# examples/.../supervisor-patch.yaml (...)")
// says it is that file, for a reader to copy: it must decode to the same
// object, comments and layout aside. docs/other-languages.md's copy of the
// AgentENV overlay's patch had drifted from the file (no service account,
// no POD_NAME or POD_UID, no -kubelet-grace: copied, the supervisor had no
// pod reader and no Events), and no test compared the two.
func TestYAMLBlocksThatNameAFileAreThatFile(t *testing.T) {
	blocks, err := namedYAMLBlocks(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		file, err := os.ReadFile(filepath.Join(root, b.file))
		if err != nil {
			t.Errorf("%s: names %s, which cannot be read: %v", b.where, b.file, err)
			continue
		}
		want, err := decodeOne(file)
		if err != nil {
			t.Errorf("%s: %s: %v", b.where, b.file, err)
			continue
		}
		got, err := decodeOne([]byte(b.code))
		if err != nil {
			t.Errorf("%s: %v", b.where, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s is not %s, which it names: copy the file again\n\tthe block: %v\n\tthe file:  %v", b.where, b.file, got, want)
		}
	}
	t.Logf("%d yaml blocks that name a file checked", len(blocks))
}

func TestANamedYAMLBlockIsComparedByContent(t *testing.T) {
	a, err := decodeOne([]byte("# a comment\nspec: {args: [-x, -y], n: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := decodeOne([]byte("spec:\n  n: 1 # the same\n  args:\n    - -x\n    - -y\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("the same object in another layout differs: %v, %v", a, b)
	}
	c, err := decodeOne([]byte("spec: {args: [-x], n: 1}\n"))
	if err != nil {
		t.Fatal(err) // a nil c would differ from a for no reason the test asks about
	}
	if reflect.DeepEqual(a, c) {
		t.Error("a block without one of the file's args compared equal")
	}
	if _, err := decodeOne([]byte("a: 1\n---\nb: 2\n")); err == nil {
		t.Error("two documents were taken for one")
	}
}

// A yamlBlock is a ```yaml block of the Markdown that names a file.
type yamlBlock struct {
	where string // file:line
	file  string // the file it names, relative to the root
	code  string
}

// namedFile is a yaml block's first line naming a file of the
// repository: "# DIR/NAME.yaml", then anything ("# values.yaml: ..." names
// the reader's own file).
var namedFile = regexp.MustCompile(`^#\s+(\S+/\S+\.ya?ml)\b`)

// namedYAMLBlocks returns the ```yaml blocks of the Markdown under root
// whose first line names a file.
func namedYAMLBlocks(root string) ([]yamlBlock, error) {
	var out []yamlBlock
	err := walkFiles(root, []string{".md"}, func(rel string, src []byte) error {
		blocks, err := fencedBlocks(rel, src, "yaml")
		for _, b := range blocks {
			first, _, _ := strings.Cut(b.code, "\n")
			if m := namedFile.FindStringSubmatch(first); m != nil {
				out = append(out, yamlBlock{where: b.where, file: m[1], code: b.code})
			}
		}
		return err
	})
	return out, err
}

// decodeOne decodes a YAML file of one document into plain values.
func decodeOne(data []byte) (any, error) {
	for _, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "---" {
			return nil, fmt.Errorf("more than one YAML document")
		}
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	return v, nil
}
