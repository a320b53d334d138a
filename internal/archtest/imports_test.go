// Package archtest holds the import rules of the three trees (docs/architecture.md): the
// service a forker keeps, the idempotency kit another service imports, and the training kit a
// learner runs — and of the Go client a merchant's program imports (client/), which speaks
// only the HTTP contract. Each rule is checked on the non-test imports of every package of the module.
package archtest

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/oncepay/oncepay"

// imports returns every package of the module with its non-test imports inside the module.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		var own []string
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module+"/") {
				own = append(own, strings.TrimPrefix(imp, module+"/"))
			}
		}
		pkgs[strings.TrimPrefix(f[0], module+"/")] = own
	}
	if len(pkgs) < 30 {
		t.Fatalf("go list found %d packages: is the test running in the module?", len(pkgs))
	}
	return pkgs
}

func under(pkg string, trees ...string) bool {
	for _, tree := range trees {
		if pkg == tree || strings.HasPrefix(pkg, tree+"/") {
			return true
		}
	}
	return false
}

// TestImportRules: each rule, with every package that breaks it named.
func TestImportRules(t *testing.T) {
	rules := []struct {
		name  string
		from  func(pkg string) bool
		allow func(imp string) bool
	}{
		{"the kit imports nothing of the service or the training kit",
			func(p string) bool { return under(p, "idempotent") },
			func(i string) bool { return under(i, "idempotent") }},
		{"the client imports nothing of the service, the kit or the training kit",
			func(p string) bool { return under(p, "client") },
			func(i string) bool { return under(i, "client") }},
		{"platform imports nothing above it",
			func(p string) bool { return under(p, "internal/platform") },
			func(i string) bool { return under(i, "internal/platform", "migrations") }},
		{"the service imports nothing of the training kit",
			func(p string) bool { return !under(p, "tools") },
			func(i string) bool { return !under(i, "tools") }},
		{"only tests import the test support",
			func(p string) bool { return !under(p, "internal/testsupport", "tools") },
			func(i string) bool { return !under(i, "internal/testsupport") }},
		{"the channel simulator imports nothing of the service",
			func(p string) bool { return under(p, "internal/channelsim", "cmd/channelsim") },
			func(i string) bool { return under(i, "internal/channelsim", "internal/platform/reportsig") }},
		{"only the composition root imports internal/app",
			func(p string) bool { return !under(p, "cmd/oncepay", "internal/testsupport", "tools") },
			func(i string) bool { return i != "internal/app" }},
	}
	pkgs := imports(t)
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			for pkg, imps := range pkgs {
				if !r.from(pkg) {
					continue
				}
				for _, imp := range imps {
					if !r.allow(imp) {
						t.Errorf("%s imports %s", pkg, imp)
					}
				}
			}
		})
	}
}
