package idempotent_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// TestREADME holds the kit's README and package doc to the code: every line of the README's
// Go snippets and of the doc's whole use is a line of the Example functions or of the
// conformance suite's own run (both run by go test), and the README's header table lists
// exactly the protocol's headers (httpkey.Headers) and the replayed ones (Guard.Policy).
func TestREADME(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, src := range []string{"example_test.go", "idemtest/conformance_test.go"} {
		code, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(code), "\n") {
			lines[strings.TrimSpace(l)] = true
		}
	}
	snippets := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(snippets) < 5 {
		t.Fatalf("README.md has %d Go snippets, want the table, the handler, the consumer, the conflict and the suite", len(snippets))
	}
	for _, s := range snippets {
		for _, l := range strings.Split(s[1], "\n") {
			if l = strings.TrimSpace(l); l != "" && !lines[l] {
				t.Errorf("README.md shows a line no Example runs: %s", l)
			}
		}
	}

	// The package doc's whole use is ExampleGuard_Do's, line for line: the doc once showed a
	// call that did not compile.
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	use := regexp.MustCompile("(?s)The whole use.*?\n//\n((?://\t[^\n]*\n|//\n)+)").FindSubmatch(doc)
	if use == nil {
		t.Fatal("doc.go no longer shows the whole use")
	}
	for _, l := range strings.Split(string(use[1]), "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(l, "//"))
		if l != "" && !strings.HasPrefix(l, "//") && !lines[l] {
			t.Errorf("the package doc shows a line no Example runs: %s", l)
		}
	}

	table := regexp.MustCompile("(?m)^\\| `([A-Za-z-]+)` \\| (request|response) \\|").FindAllStringSubmatch(string(readme), -1)
	var listed []string
	for _, row := range table {
		listed = append(listed, row[1])
	}
	if want := httpkey.Headers(); strings.Join(listed, ",") != strings.Join(want, ",") {
		t.Errorf("README.md's header table lists %v, want httpkey.Headers() %v", listed, want)
	}
	g := idempotent.New(idemtest.DB(t, idemtest.SQLite), idemtest.Redis(t), idempotent.Config{})
	var replayed []string
	for _, h := range g.Policy().ReplayedHeaders {
		replayed = append(replayed, "`"+h+"`")
	}
	if want := "(`Guard.Policy().ReplayedHeaders`): " + strings.Join(replayed, ", ") + "."; !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not say %q", want)
	}
}
