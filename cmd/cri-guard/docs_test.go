package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

const repoRoot = "../.."

// pendingDocs are docs the README links to that other changes add; until
// they exist a link to them is not an error (a link into them still is,
// once they do).
var pendingDocs = []string{
	"docs/fleet-benchmark.md",
	"docs/kubernetes-api.md",
	"docs/compatibility.md",
	"docs/taint-controller.md",
}

var (
	mdLink     = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	inlineCode = regexp.MustCompile("`[^`]*`")
	htmlAnchor = regexp.MustCompile(`<a id="([^"]+)"></a>`)
)

// link is a link target of a markdown text, at its line.
type link struct {
	line   int
	target string
}

// markdownLinks returns the link targets of a markdown text, outside fenced
// code blocks and code spans.
func markdownLinks(text string) []link {
	var out []link
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
			out = append(out, link{i + 1, m[1]})
		}
	}
	return out
}

// anchors returns the fragment ids of a markdown text as GitHub makes them:
// each heading lowercased, stripped of punctuation but hyphens and
// underscores, spaces made hyphens, a repeat suffixed -1, -2...; and every
// <a id="..."></a>.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// brokenLinks returns the relative links of the markdown file rel (a path
// under root) that do not resolve, at their lines: a missing file (but a
// pending one), or a fragment that names no heading of the file it points
// into.
func brokenLinks(root, rel string, pending []string) ([]finding, error) {
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	var bad []finding
	for _, l := range markdownLinks(string(b)) {
		target := l.target
		report := func(why string) { bad = append(bad, finding{rel, l.line, target + ": " + why}) }
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		path, frag, _ := strings.Cut(target, "#")
		dest := rel
		if path != "" {
			dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(rel), path)))
		}
		if strings.HasPrefix(dest, "../") {
			report("outside the repository")
			continue
		}
		content, err := os.ReadFile(filepath.Join(root, dest))
		if err != nil {
			if os.IsNotExist(err) && slices.Contains(pending, dest) {
				continue
			}
			report("no file " + dest)
			continue
		}
		if frag != "" && strings.HasSuffix(dest, ".md") && !anchors(string(content))[frag] {
			report("no heading #" + frag + " in " + dest)
		}
	}
	return bad, nil
}

// TestBrokenLinks: the check finds a missing file, a missing heading and a
// link out of the repository, and passes good links, code and pending docs.
func TestBrokenLinks(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "docs"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/a.md", "# A\n\n## The production platform, in a guest (`scripts/vm.sh`)\n\n## Dup\n\n## Dup\n\n<a id=\"metrics\"></a>\n")
	for _, tc := range []struct {
		name, text string
		bad        []string
	}{
		{"good", "[a](docs/a.md) [b](docs/a.md#a) [c](docs/a.md#the-production-platform-in-a-guest-scriptsvmsh) [d](docs/a.md#dup-1) [e](docs/a.md#metrics) [w](https://example.com/x.md)", nil},
		{"missing file", "[x](docs/b.md)", []string{"README.md:1: docs/b.md: no file docs/b.md"}},
		{"missing heading", "text\n\n[x](docs/a.md#nope)", []string{"README.md:3: docs/a.md#nope: no heading #nope in docs/a.md"}},
		{"outside", "[x](../etc/passwd)", []string{"README.md:1: ../etc/passwd: outside the repository"}},
		{"pending", "[x](docs/pending.md)", nil},
		{"in code", "`[x](docs/b.md)`\n```\n[y](docs/c.md)\n```\n", nil},
		{"own heading", "# Top\n[x](#top) [y](#bottom)", []string{"README.md:2: #bottom: no heading #bottom in README.md"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write("README.md", tc.text)
			bad, err := brokenLinks(root, "README.md", []string{"docs/pending.md"})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, b := range bad {
				got = append(got, b.String())
			}
			if !slices.Equal(got, tc.bad) {
				t.Errorf("brokenLinks = %q, want %q", got, tc.bad)
			}
		})
	}
}
