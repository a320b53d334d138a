package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"gopkg.in/yaml.v3"

	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// specPath is api/openapi.yaml, relative to this package's directory (go test runs there).
const specPath = "../../api/openapi.yaml"

// notServedYet lists the routes the spec publishes ahead of the code: the contract's routes
// whose issue has not landed. Remove an entry when its issue lands — the test fails while a
// listed route is served, so the list cannot go stale. Entries are "METHOD /path".
var notServedYet = map[string]bool{}

// httpMethods are the operation keys of an OpenAPI path item.
var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// spec is the part of api/openapi.yaml these tests read, plus the whole document for $ref.
type spec struct {
	Paths map[string]map[string]operation `yaml:"paths"`
	doc   map[string]any
}

type operation struct {
	Security   []map[string][]string `yaml:"security"`
	Parameters []map[string]any      `yaml:"parameters"`
	Responses  map[string]any        `yaml:"responses"`
}

// loadSpec reads and parses api/openapi.yaml.
func loadSpec(t *testing.T) spec {
	t.Helper()
	raw, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatalf("read %s: %v", specPath, err)
	}
	var s spec
	if err := yaml.Unmarshal(raw, &s); err != nil {
		t.Fatalf("parse %s: %v", specPath, err)
	}
	if err := yaml.Unmarshal(raw, &s.doc); err != nil {
		t.Fatalf("parse %s: %v", specPath, err)
	}
	if v, _ := s.doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi: %q, want 3.1.x", v)
	}
	if len(s.Paths) == 0 {
		t.Fatalf("%s has no paths", specPath)
	}
	return s
}

// routes returns the spec's operations as "METHOD /path".
func (s spec) routes() map[string]bool {
	out := map[string]bool{}
	for path, item := range s.Paths {
		for method := range item {
			if slices.Contains(httpMethods, method) {
				out[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	return out
}

// router returns the router of a fresh instance.
func router(t *testing.T) chi.Routes {
	t.Helper()
	a := newApp(t, apptest.NewDeps(t))
	mux, ok := a.Handler().(chi.Routes)
	if !ok {
		t.Fatalf("a.Handler() is a %T, not a chi router", a.Handler())
	}
	return mux
}

// servedRoutes walks the router of a fresh instance and returns its routes as
// "METHOD /path", each with its mark (idem.KindOf; "" for an unmarked route). A sub-router's
// root ("/v1/orders/") is served without the slash too, and that is how the spec names it.
func servedRoutes(t *testing.T) map[string]idem.Kind {
	t.Helper()
	out := map[string]idem.Kind{}
	err := chi.Walk(router(t), func(method, route string, h http.Handler, _ ...func(http.Handler) http.Handler) error {
		if len(route) > 1 {
			route = strings.TrimSuffix(route, "/")
		}
		out[method+" "+route] = idem.KindOf(h)
		return nil
	})
	if err != nil {
		t.Fatalf("chi.Walk: %v", err)
	}
	return out
}

// keyRequired returns the routes of a fresh instance marked as requiring an Idempotency-Key.
func keyRequired(t *testing.T) map[string]bool {
	t.Helper()
	var marks idem.Marks
	marks.Collect(router(t))
	out := map[string]bool{}
	for _, r := range marks.KeyRequired() {
		out[r] = true
	}
	if !out["POST /v1/orders"] {
		t.Fatalf("the marks name %v as requiring a key, not POST /v1/orders: the walk is broken", out)
	}
	return out
}

// compareRoutes lists every disagreement between the served routes, the spec's routes and
// the allow-list of routes published ahead of the code.
func compareRoutes[V any](served map[string]V, documented, ahead map[string]bool) []string {
	var out []string
	for r := range served {
		if !documented[r] {
			out = append(out, fmt.Sprintf("%s is served but api/openapi.yaml lacks it: document it", r))
		}
		if ahead[r] {
			out = append(out, fmt.Sprintf("%s is served now: remove it from notServedYet", r))
		}
	}
	for r := range documented {
		if _, ok := served[r]; !ok && !ahead[r] {
			out = append(out, fmt.Sprintf("%s is in api/openapi.yaml but not served: mount it, or fix the spec", r))
		}
	}
	for r := range ahead {
		if !documented[r] {
			out = append(out, fmt.Sprintf("%s is in notServedYet but not in api/openapi.yaml", r))
		}
	}
	sort.Strings(out)
	return out
}

// TestSpecMatchesRouter checks that api/openapi.yaml documents exactly the routes the
// router serves, in both directions.
func TestSpecMatchesRouter(t *testing.T) {
	served := servedRoutes(t)
	_, inventory := served["GET /v1/inventory/{sku}"]
	if _, healthz := served["GET /healthz"]; !inventory || !healthz {
		t.Fatalf("walking the router found %v: the walk is broken", served)
	}
	for _, problem := range compareRoutes(served, loadSpec(t).routes(), notServedYet) {
		t.Error(problem)
	}
}

// TestCompareRoutes checks that the comparison fails in each direction.
func TestCompareRoutes(t *testing.T) {
	set := func(routes ...string) map[string]bool {
		m := map[string]bool{}
		for _, r := range routes {
			m[r] = true
		}
		return m
	}
	tests := []struct {
		name                      string
		served, documented, ahead map[string]bool
		want                      int
	}{
		{"agree", set("GET /a", "POST /b"), set("GET /a", "POST /b"), set(), 0},
		{"served, not documented", set("GET /a", "POST /b"), set("GET /a"), set(), 1},
		{"documented, not served", set("GET /a"), set("GET /a", "POST /b"), set(), 1},
		{"documented ahead of the code", set("GET /a"), set("GET /a", "POST /b"), set("POST /b"), 0},
		{"allow-listed but served", set("GET /a", "POST /b"), set("GET /a", "POST /b"), set("POST /b"), 1},
		{"allow-listed, not documented", set("GET /a"), set("GET /a"), set("POST /b"), 1},
		{"method matters", set("GET /a"), set("POST /a"), set(), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := compareRoutes(tt.served, tt.documented, tt.ahead); len(got) != tt.want {
				t.Errorf("compareRoutes = %q, want %d problems", got, tt.want)
			}
		})
	}
}

// TestSpecRefsResolve checks that every $ref in the spec points at something in it.
func TestSpecRefsResolve(t *testing.T) {
	s := loadSpec(t)
	var refs []string
	collectRefs(s.doc, &refs)
	if len(refs) == 0 {
		t.Fatal("found no $ref: the walk is broken")
	}
	for _, ref := range refs {
		if _, err := s.resolve(ref); err != nil {
			t.Error(err)
		}
	}
}

func collectRefs(node any, refs *[]string) {
	switch n := node.(type) {
	case map[string]any:
		for k, v := range n {
			if s, ok := v.(string); ok && k == "$ref" {
				*refs = append(*refs, s)
				continue
			}
			collectRefs(v, refs)
		}
	case []any:
		for _, v := range n {
			collectRefs(v, refs)
		}
	}
}

// resolve follows a local JSON pointer ("#/components/...") through the document.
func (s spec) resolve(ref string) (any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("$ref %q is not local to the spec", ref)
	}
	var node any = s.doc
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.NewReplacer("~1", "/", "~0", "~").Replace(part)
		m, ok := node.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("$ref %q: %q is not inside an object", ref, part)
		}
		if node, ok = m[part]; !ok {
			return nil, fmt.Errorf("$ref %q: no %q", ref, part)
		}
	}
	return node, nil
}

// deref returns node, or what it points at when it is a {$ref: ...}.
func (s spec) deref(t *testing.T, node any) map[string]any {
	t.Helper()
	m, _ := node.(map[string]any)
	if ref, ok := m["$ref"].(string); ok {
		target, err := s.resolve(ref)
		if err != nil {
			t.Fatal(err)
		}
		m, _ = target.(map[string]any)
	}
	return m
}

// pathParam matches a {name} in a path template.
var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// TestSpecOperations checks what the contract requires of every operation: each response
// carries X-Request-Id, errors are problem+json, each path parameter is declared, the
// endpoints that require an Idempotency-Key — the routes mounted with that mark
// (idem.KeyRequired) — declare it and no other does, and each route names the right security
// scheme.
func TestSpecOperations(t *testing.T) {
	s := loadSpec(t)
	idempotencyKeyRequired := keyRequired(t)
	for path, item := range s.Paths {
		for method, op := range item {
			name := strings.ToUpper(method) + " " + path
			t.Run(name, func(t *testing.T) {
				params := map[string]bool{}
				for _, p := range op.Parameters {
					p = s.deref(t, p)
					params[fmt.Sprint(p["in"], ":", p["name"])] = true
				}
				for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
					if !params["path:"+m[1]] {
						t.Errorf("path parameter %s is not declared", m[1])
					}
				}
				if got := params["header:Idempotency-Key"]; got != idempotencyKeyRequired[name] {
					t.Errorf("declares Idempotency-Key: %v, want %v", got, idempotencyKeyRequired[name])
				}
				if len(op.Responses) == 0 {
					t.Fatal("no responses")
				}
				for status, resp := range op.Responses {
					r := s.deref(t, resp)
					headers, _ := r["headers"].(map[string]any)
					if _, ok := headers["X-Request-Id"]; !ok {
						t.Errorf("response %s lacks the X-Request-Id header", status)
					}
					content, _ := r["content"].(map[string]any)
					// An HTML page shows the problem of a handle it refuses on the page itself.
					_, page := content["text/html"]
					if _, problem := content["application/problem+json"]; strings.HasPrefix(status, "4") || strings.HasPrefix(status, "5") {
						if !problem && !page && path != "/readyz" {
							t.Errorf("error response %s is not application/problem+json", status)
						}
					}
				}
				var schemes []string
				for _, req := range op.Security {
					for scheme := range req {
						schemes = append(schemes, scheme)
					}
				}
				if want := wantSecurity(path); !slices.Equal(schemes, want) {
					t.Errorf("security %v, want %v", schemes, want)
				}
			})
		}
	}
}

// wantSecurity is the security scheme a route must declare, from its path.
func wantSecurity(path string) []string {
	switch {
	case strings.HasPrefix(path, "/v1/admin/"):
		return []string{"adminKey"}
	case strings.HasSuffix(path, "/notify"):
		return []string{"channelSignature"}
	case path == "/healthz", path == "/readyz", path == "/metrics", strings.HasPrefix(path, "/v1/inventory/"),
		path == "/v1/idempotency-policy":
		return nil
	default:
		return []string{"userKey"}
	}
}

// TestSpecProblemCodes checks that the Problem schema's code enum names every code the
// running service answers with on the routes these tests can reach without the other
// packages' fixtures.
func TestSpecProblemCodes(t *testing.T) {
	codes := map[string]bool{}
	schema := loadSpec(t).deref(t, map[string]any{"$ref": "#/components/schemas/ProblemCode"})
	enum, _ := schema["enum"].([]any)
	for _, c := range enum {
		codes[fmt.Sprint(c)] = true
	}
	_, srv := newServer(t)
	probes := []struct{ method, path, key, body string }{
		{http.MethodGet, "/nope", "", ""},
		{http.MethodDelete, "/v1/inventory/SKU-1001", "", ""},
		{http.MethodPut, "/v1/admin/inventory/SKU-1001", "", `{"price":1,"available":1}`},
		{http.MethodPut, "/v1/admin/inventory/SKU-1001", aliceKey, `{"price":1,"available":1}`},
		{http.MethodPut, "/v1/admin/inventory/SKU-1001", adminKey, `{"price":1}`},
		{http.MethodPut, "/v1/admin/inventory/SKU-1001", adminKey, `{"price":1,"available":1,"x":1}`},
	}
	for _, p := range probes {
		res, body := call(t, p.method, srv.URL+p.path, p.key, p.body)
		var problem struct{ Code string }
		if err := json.Unmarshal(body, &problem); err != nil || problem.Code == "" {
			t.Errorf("%s %s = %d %s: not a problem", p.method, p.path, res.StatusCode, body)
			continue
		}
		if !codes[problem.Code] {
			t.Errorf("%s %s answers code %q, which the spec's ProblemCode enum lacks", p.method, p.path, problem.Code)
		}
	}
	for _, c := range []string{
		"idempotency_key_missing", "idempotency_key_invalid", "idempotency_token_invalid",
		"idempotency_key_in_use", "idempotency_key_reused", "invalid_request", "unknown_sku",
		"unauthorized", "invalid_signature", "forbidden", "not_found", "out_of_stock",
		"illegal_state", "amount_mismatch", "payload_too_large", "unavailable", "internal",
		"effect_committed",
	} {
		if !codes[c] {
			t.Errorf("the spec's ProblemCode enum lacks docs/contract.md's code %q", c)
		}
	}
}
