package doccheck

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// A link of the Markdown sends its reader to a file of the repository, or
// to a section of a page: a file moved, or a heading reworded, leaves the
// link pointing at nothing, and nothing checked them. Every relative link
// of README.md, docs/ and the examples' pages must name a file or
// directory of the repository, and every #anchor a heading of the page it
// names, as GitHub makes its anchors.
func TestEveryLinkReachesItsFileAndHeading(t *testing.T) {
	pages := map[string]string{} // every Markdown page by its path from the root
	err := walkFiles(root, []string{".md"}, func(rel string, src []byte) error {
		pages[rel] = string(src)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	exists := func(rel string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
		return err == nil
	}
	checked := 0
	for page, src := range pages {
		for _, l := range links(src) {
			checked++
			if msg := l.broken(page, pages, exists); msg != "" {
				t.Errorf("%s:%d: (%s) %s", page, l.line, l.target, msg)
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no link: are the pages right?")
	}
	t.Logf("%d links in %d pages checked", checked, len(pages))
}

func TestLinksAreReadAsGitHubFollowsThem(t *testing.T) {
	pages := map[string]string{
		"README.md": "# drainkit\n\n## See it: `go run ./examples/drainsim`\n\n## Set-up — two commands\n\n## Set-up — two commands\n",
		"docs/a.md": "# A page\n\n```sh\n# not a heading\n```\n\n### What is public?\n",
	}
	files := map[string]bool{"README.md": true, "docs/a.md": true, "docs/b.png": true, "kube": true}
	exists := func(rel string) bool { return files[rel] }
	for _, tc := range []struct {
		page, text string
		bad        []string // the targets found broken
	}{
		{"README.md", "[a](docs/a.md), [b](docs/b.png), ![c](docs/b.png \"a title\"), [d](kube)", nil},
		{"README.md", "[a](docs/gone.md) and [b](./kube/)", []string{"docs/gone.md"}},
		{"docs/a.md", "[a](../README.md#see-it-go-run-examplesdrainsim), [b](#what-is-public), [c](../kube)", nil},
		{"docs/a.md", "[a](../README.md#set-up--two-commands-1), [b](../README.md#set-up--two-commands-2)", []string{"../README.md#set-up--two-commands-2"}},
		{"docs/a.md", "[a](#not-a-heading), [b](b.png#top), [c](../../outside.md)", []string{"#not-a-heading", "b.png#top", "../../outside.md"}},
		{"README.md", "[a](https://github.com/x/y#gone), [b](mailto:x@y), `[c](gone.md)`", nil},
		{"README.md", "```\n[a](gone.md)\n```\n[the\nlink](docs/a.md#a-page)", nil},
	} {
		var bad []string
		for _, l := range links(tc.text) {
			if l.broken(tc.page, pages, exists) != "" {
				bad = append(bad, l.target)
			}
		}
		if fmt.Sprint(bad) != fmt.Sprint(tc.bad) {
			t.Errorf("%s: %q: broken %q, want %q", tc.page, tc.text, bad, tc.bad)
		}
	}
}

// A link is a Markdown link's target, as written, and its line.
type link struct {
	target string
	line   int
}

var (
	// mdLink is an inline link or image: [text](target "title").
	mdLink = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// scheme starts a target that leaves the repository: https:, mailto:.
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	// heading is an ATX heading's text.
	heading = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
)

// links returns the links of a Markdown page that stay in the repository,
// out of its fenced blocks and code spans, where a bracket is text.
func links(src string) []link {
	text := codeSpan.ReplaceAllStringFunc(prose(src), blank)
	var out []link
	for _, m := range mdLink.FindAllStringSubmatchIndex(text, -1) {
		target := text[m[2]:m[3]]
		if scheme.MatchString(target) {
			continue
		}
		out = append(out, link{target: target, line: 1 + strings.Count(text[:m[0]], "\n")})
	}
	return out
}

// broken says what is wrong with the link of page (a path from the root):
// the file it names is not in the repository, or its anchor is no
// heading's there; "" when it reaches both.
func (l link) broken(page string, pages map[string]string, exists func(rel string) bool) string {
	file, anchor, _ := strings.Cut(l.target, "#")
	target := page
	if file != "" {
		target = path.Join(path.Dir(page), file)
		if target == ".." || strings.HasPrefix(target, "../") {
			return "names a file out of the repository"
		}
		if !exists(target) {
			return fmt.Sprintf("names %s, which is not in the repository", target)
		}
	}
	if anchor == "" {
		return ""
	}
	src, ok := pages[target]
	if !ok {
		return fmt.Sprintf("has an anchor, #%s, in %s, which is not a Markdown page", anchor, target)
	}
	if !anchors(src)[anchor] {
		return fmt.Sprintf("has an anchor, #%s, which no heading of %s makes", anchor, target)
	}
	return ""
}

// anchors returns the anchors GitHub gives the headings of a Markdown
// page: lower case, each character but a letter, a digit, a space, - or _
// dropped, spaces made -, and -1, -2 … added to a repeated one.
func anchors(src string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(prose(src), "\n") {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		slug := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.M, r):
				return unicode.ToLower(r)
			}
			return -1
		}, m[1])
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}
