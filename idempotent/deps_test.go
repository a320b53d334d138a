package idempotent_test

import (
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// kitPackages are the packages of the idempotency kit; each of them is a library another
// module imports.
var kitPackages = []string{"", "/httpkey", "/dberr", "/mysqlerr", "/sqliteerr", "/pgerr", "/idemops", "/idemtest", "/idemlab"}

// coreModules are the only modules the core and its net/http adapter may build with: a
// service that imports them pulls in gorm, go-redis, redsync, Prometheus's client and
// hashicorp's LRU (the answers a guard keeps in memory; it has no dependency of its own),
// never a SQL driver, a router, a migration tool or a Kafka client.
var coreModules = []string{
	"github.com/beorn7/perks", "github.com/cespare/xxhash/v2", "github.com/go-redsync/redsync/v4",
	"github.com/hashicorp/golang-lru/v2",
	"github.com/jinzhu/inflection", "github.com/jinzhu/now", "github.com/munnerz/goautoneg",
	"github.com/oncepay/oncepay/idempotent", "github.com/prometheus/client_golang", "github.com/prometheus/client_model",
	"github.com/prometheus/common", "github.com/prometheus/procfs", "github.com/redis/go-redis/v9",
	"go.uber.org/atomic", "golang.org/x/sys", "golang.org/x/text", "google.golang.org/protobuf", "gorm.io/gorm",
}

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

// TestImportsNothingOfOncepay: no package of the kit knows a transport, SQL driver, error
// type or id generator of oncepay — they come in through Config — so that it can be lifted
// out as a library. Each one's dependency graph (tests excluded) holds no oncepay package
// outside idempotent/.
func TestImportsNothingOfOncepay(t *testing.T) {
	t.Parallel()
	const kit = "github.com/oncepay/oncepay/idempotent"
	for _, sub := range kitPackages {
		self := kit + sub
		deps := goList(t, "-deps", self)
		if !slices.Contains(deps, self) {
			t.Errorf("go list -deps %s printed %d packages without the package itself", self, len(deps))
		}
		for _, pkg := range deps {
			if strings.HasPrefix(pkg, "github.com/oncepay/oncepay/") && pkg != kit && !strings.HasPrefix(pkg, kit+"/") {
				t.Errorf("%s depends on %s", self, pkg)
			}
		}
	}
}

// TestCoreBuildsWithFewModules: the core and its net/http adapter build with the modules of
// coreModules and nothing else (go list -deps, tests excluded).
func TestCoreBuildsWithFewModules(t *testing.T) {
	t.Parallel()
	const kit = "github.com/oncepay/oncepay/idempotent"
	mods := goList(t, "-deps", "-f", "{{if not .Standard}}{{.Module.Path}}{{end}}", kit, kit+"/httpkey")
	for _, m := range mods {
		if !slices.Contains(coreModules, m) {
			t.Errorf("the core's build pulls in module %s", m)
		}
	}
	if !slices.Contains(mods, "gorm.io/gorm") {
		t.Errorf("go list printed %d modules without gorm: is it listing the core?", len(mods))
	}
}

// TestModuleRequiresNothingOfOncepay: the kit is a module of its own, which a stranger gets
// with go get github.com/oncepay/oncepay/idempotent and which brings only the kit's own
// dependencies. Its module graph (go list -m all) holds no other module of oncepay — the
// service's least of all, whose go.mod would pull in Kafka, the router and the migrations
// tool — and its go.mod replaces nothing, since a replace binds no one but the kit's own
// builds and would hide a requirement a stranger cannot resolve.
func TestModuleRequiresNothingOfOncepay(t *testing.T) {
	t.Parallel()
	const kit = "github.com/oncepay/oncepay/idempotent"
	mods := goList(t, "-m", "-f", "{{.Path}}", "all")
	if len(mods) == 0 || mods[0] != kit {
		t.Fatalf("go list -m all starts with %q, want the kit's module %s: is the test running in it?", mods, kit)
	}
	for _, m := range mods[1:] {
		if m == "github.com/oncepay/oncepay" || strings.HasPrefix(m, "github.com/oncepay/") {
			t.Errorf("the kit's module graph holds %s", m)
		}
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gobin, "mod", "edit", "-json").Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct {
		Module  struct{ Path string }
		Replace []struct{ Old, New struct{ Path string } }
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatal(err)
	}
	if mod.Module.Path != kit {
		t.Fatalf("go.mod declares module %q, want %s", mod.Module.Path, kit)
	}
	for _, r := range mod.Replace {
		t.Errorf("the kit's go.mod replaces %s with %s", r.Old.Path, r.New.Path)
	}
}
