package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestAddAWriteGuide holds docs/add-a-write.md to the tree: every file it names exists, every
// test it says holds a step is a test function of the repository, and every identifier it
// tells a reader to look for is declared or used where the guide sends them. A renamed file
// or test fails here instead of leaving the guide pointing at nothing. It also holds step 10:
// no test of a domain package (internal/ but app and testsupport) starts the whole service
// with apptest.Start or apptest.StartHTTPOnly; each names its parts with apptest.StartOnly.
func TestAddAWriteGuide(t *testing.T) {
	root := filepath.Join("..", "..")
	page, err := os.ReadFile(filepath.Join(root, "docs", "add-a-write.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(page)

	// Paths: backquoted, starting at a top-level directory; a placeholder (000NN, <name>) is
	// a file the reader makes, not one that exists.
	paths := regexp.MustCompile("`((?:migrations|internal|api|docs|cmd|idempotent)/[^`<> ]+)`").FindAllStringSubmatch(text, -1)
	if len(paths) < 8 {
		t.Fatalf("found %d paths in the guide: the pattern or the page is broken", len(paths))
	}
	for _, m := range paths {
		if strings.Contains(m[1], "NN") {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("docs/add-a-write.md names %s, which does not exist", m[1])
		}
	}

	tests := map[string]bool{}
	funcs := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	var wholeStarts []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, "_test.go") {
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range funcs.FindAllStringSubmatch(string(src), -1) {
				tests[m[1]] = true
			}
			if rel, _ := filepath.Rel(root, path); isDomain(rel) {
				wholeStarts = append(wholeStarts, startsOfTheWholeService(rel, string(src))...)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Step 10: a domain's tests start what they need. The guide's example test does, and so
	// does every test of a domain package, the model's and a new one's alike.
	code := strings.Join(regexp.MustCompile("(?s)```go\n(.*?)```").FindAllString(text, -1), "\n")
	if !strings.Contains(code, "func Test") || !strings.Contains(code, "apptest.StartOnly(t, apptest.Router)") {
		t.Errorf("docs/add-a-write.md no longer shows, in Go, a domain test that starts with apptest.StartOnly(t, apptest.Router)")
	}
	for _, m := range wholeStart.FindAllString(text, -1) {
		t.Errorf("docs/add-a-write.md shows a test starting the whole service with %s…)", m)
	}
	for _, at := range wholeStarts {
		t.Errorf("%s starts the whole service: a domain's tests name the parts they need with apptest.StartOnly (docs/add-a-write.md, step 10)", at)
	}
	named := regexp.MustCompile("`(Test\\w+)`").FindAllStringSubmatch(text, -1)
	if len(named) < 5 {
		t.Fatalf("found %d tests named in the guide: the pattern or the page is broken", len(named))
	}
	for _, m := range named {
		if !tests[m[1]] {
			t.Errorf("docs/add-a-write.md names the test %s, which no _test.go declares", m[1])
		}
	}

	// The identifiers the checklist sends a reader to find, in the file it sends them to.
	for file, idents := range map[string][]string{
		"internal/account/recharge.go":      {"func (s *Recharges) Create(ctx context.Context, tx *gorm.DB", "database.Hold(tx)", "record(rc)", "apperr.ErrInvalidRequest.Withf"},
		"internal/account/http.go":          {"idem.KeyRequired(h.idem, h.createRecharge)", "h.idem.Reject", "h.idem.Do(", "idem.JSON(http.StatusCreated"},
		"internal/order/service.go":         {"func (s *Service) Create(ctx context.Context, tx *gorm.DB", "record(o)"},
		"internal/app/routes_test.go":       {"var notIdempotentByKey"},
		"internal/app/writeplan_test.go":    {"recordFirst :="},
		"internal/app/app.go":               {"account.NewRecharges("},
		"internal/account/recharge_test.go": {"apptest.StartOnly(t, apptest.Router, accountConfig)"},
	} {
		src, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		for _, id := range idents {
			if !strings.Contains(string(src), id) {
				t.Errorf("docs/add-a-write.md sends a reader to %s for %q, which is no longer there", file, id)
			}
		}
	}
}

// wholeStart matches the starts of apptest that run every part of an instance: Kafka, the
// channel simulator and the background loops, whatever the test needs.
var wholeStart = regexp.MustCompile(`apptest\.(?:Start|StartHTTPOnly)\(`)

// isDomain reports whether the file at rel (from the repository's root) is in a domain package:
// a package of internal/ other than app, whose tests are the whole service's, and testsupport.
func isDomain(rel string) bool {
	parts := strings.Split(filepath.ToSlash(rel), "/")
	return len(parts) > 2 && parts[0] == "internal" && parts[1] != "app" && parts[1] != "testsupport"
}

// startsOfTheWholeService returns "file:line" for every line of src, the test file at rel, that
// starts an instance with every part.
func startsOfTheWholeService(rel, src string) []string {
	var at []string
	for i, line := range strings.Split(src, "\n") {
		if wholeStart.MatchString(line) {
			at = append(at, fmt.Sprintf("%s:%d", filepath.ToSlash(rel), i+1))
		}
	}
	return at
}
