package client_test

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// goList runs go list with args and returns its lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH: %v", err)
	}
	out, err := exec.Command(gobin, append([]string{"list"}, args...)...).Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	var lines []string
	for line := range strings.Lines(string(out)) {
		if l := strings.TrimSpace(line); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestImportsNothingOfOncepay: the client's build (tests excluded) holds no package of this
// repository but itself — no internal/, no training kit, not even the idempotency kit — so that a
// merchant's program that imports it gets the HTTP contract and nothing of the server.
func TestImportsNothingOfOncepay(t *testing.T) {
	t.Parallel()
	const self = "github.com/oncepay/oncepay/client"
	deps := goList(t, "-deps", self)
	if !slices.Contains(deps, self) {
		t.Fatalf("go list -deps %s printed %d packages without the package itself", self, len(deps))
	}
	for _, pkg := range deps {
		if strings.HasPrefix(pkg, "github.com/oncepay/oncepay/") && pkg != self {
			t.Errorf("the client depends on %s", pkg)
		}
	}
}

// TestBuildsWithTheStandardLibraryAndGoRetry: the only modules the client's build pulls in
// are its own and github.com/sethvargo/go-retry.
func TestBuildsWithTheStandardLibraryAndGoRetry(t *testing.T) {
	t.Parallel()
	mods := goList(t, "-deps", "-f", "{{if not .Standard}}{{.Module.Path}}{{end}}", "github.com/oncepay/oncepay/client")
	for _, m := range mods {
		if m != "github.com/oncepay/oncepay" && m != "github.com/sethvargo/go-retry" {
			t.Errorf("the client's build pulls in module %s", m)
		}
	}
	if !slices.Contains(mods, "github.com/sethvargo/go-retry") {
		t.Errorf("go list printed modules %v without go-retry: is it listing the client?", mods)
	}
}
