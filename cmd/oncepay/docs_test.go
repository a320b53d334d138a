package main

import (
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
// or test fails here instead of leaving the guide pointing at nothing.
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
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
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
		"internal/account/recharge.go":   {"func (s *Recharges) Create(ctx context.Context, tx *gorm.DB", "database.Hold(tx)", "record(rc)", "apperr.ErrInvalidRequest.Withf"},
		"internal/account/http.go":       {"idem.KeyRequired(h.idem, h.createRecharge)", "h.idem.Reject", "h.idem.Do(", "idem.JSON(http.StatusCreated"},
		"internal/order/service.go":      {"func (s *Service) Create(ctx context.Context, tx *gorm.DB", "record(o)"},
		"internal/app/routes_test.go":    {"var notIdempotentByKey"},
		"internal/app/writeplan_test.go": {"recordFirst :="},
		"internal/app/app.go":            {"account.NewRecharges("},
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
