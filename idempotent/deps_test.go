package idempotent_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNothingOfOncepay: the core knows no transport, SQL driver, error type or id
// generator of oncepay — they come in through Config — so that it can be lifted out as a
// library. Its dependency graph (tests excluded) holds no other oncepay package.
func TestImportsNothingOfOncepay(t *testing.T) {
	t.Parallel()
	const self = "github.com/oncepay/oncepay/idempotent"
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH: %v", err)
	}
	out, err := exec.Command(gobin, "list", "-deps", self).Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v\n%s", self, err, stderr)
	}
	var deps int
	for line := range strings.Lines(string(out)) {
		pkg := strings.TrimSpace(line)
		deps++
		if strings.HasPrefix(pkg, "github.com/oncepay/oncepay/") && pkg != self {
			t.Errorf("%s depends on %s", self, pkg)
		}
	}
	if deps < 2 || !strings.Contains(string(out), self+"\n") {
		t.Errorf("go list -deps printed %d packages without %s itself:\n%s", deps, self, out)
	}
}
