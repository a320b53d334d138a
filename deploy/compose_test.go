package deploy_test

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The files under test, relative to this package's directory (go test runs tests there).
const (
	composePath    = "../docker-compose.yml"
	dockerfilePath = "../Dockerfile"
)

// appService is the compose service that runs oncepay itself.
const appService = "app"

// composeFile is the part of a Compose file these checks read; unknown keys are ignored.
type composeFile struct {
	// Services maps a service name to its definition.
	Services map[string]service `yaml:"services"`
}

// service is the part of a Compose service these checks read.
type service struct {
	// Image is the image reference; it may be empty when the service is built locally.
	Image string `yaml:"image"`
	// Build is the build context (a string or a map); nil when the service only pulls.
	Build any `yaml:"build"`
	// Environment is the container's environment, written as a map or as a list.
	Environment environment `yaml:"environment"`
	// DependsOn is the services this one waits for, with the condition it waits on.
	DependsOn dependsOn `yaml:"depends_on"`
	// Healthcheck is how Compose decides the service is healthy; nil when there is none.
	Healthcheck *healthcheck `yaml:"healthcheck"`
}

// healthcheck is the part of a Compose healthcheck these checks read.
type healthcheck struct {
	// Test is the probe, a string or a list such as ["CMD", "redis-cli", "ping"].
	Test any `yaml:"test"`
	// Disable turns off a healthcheck inherited from the image.
	Disable bool `yaml:"disable"`
}

// envValue is one environment entry. Set is false for a bare name (list form `- NAME` or
// map form `NAME:`), which Compose passes through from the shell and may leave unset.
type envValue struct {
	Value string
	Set   bool
}

// environment is a service's environment. Compose accepts it as a map (`NAME: value`) or as
// a list (`- NAME=value`); both decode to the same map.
type environment map[string]envValue

// UnmarshalYAML decodes either form of a Compose environment.
func (e *environment) UnmarshalYAML(node *yaml.Node) error {
	node = resolveAlias(node)
	out := environment{}
	switch node.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			name, v := resolveAlias(node.Content[i]).Value, resolveAlias(node.Content[i+1])
			if name == "<<" && v != nil && v.Kind == yaml.MappingNode {
				// A YAML merge key (`<<: *shared`): the shared entries, which the entries
				// written beside it override, whatever their order.
				var merged environment
				if err := merged.UnmarshalYAML(v); err != nil {
					return err
				}
				for k, mv := range merged {
					if _, own := out[k]; !own {
						out[k] = mv
					}
				}
				continue
			}
			if v == nil || v.Tag == "!!null" {
				out[name] = envValue{}
				continue
			}
			if v.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: environment %s must be a scalar", v.Line, name)
			}
			out[name] = envValue{Value: v.Value, Set: true}
		}
	case yaml.SequenceNode:
		var raw []string
		if err := node.Decode(&raw); err != nil {
			return err
		}
		for _, entry := range raw {
			name, value, set := strings.Cut(entry, "=")
			out[name] = envValue{Value: value, Set: set}
		}
	default:
		return fmt.Errorf("line %d: environment must be a map or a list", node.Line)
	}
	*e = out
	return nil
}

// dependsOn maps each dependency to the condition the service waits on. Compose accepts a
// list of names (which means service_started) or a map with a condition per name.
type dependsOn map[string]string

// UnmarshalYAML decodes either form of a Compose depends_on.
func (d *dependsOn) UnmarshalYAML(node *yaml.Node) error {
	node = resolveAlias(node)
	out := dependsOn{}
	switch node.Kind {
	case yaml.SequenceNode:
		var names []string
		if err := node.Decode(&names); err != nil {
			return err
		}
		for _, name := range names {
			out[name] = "service_started"
		}
	case yaml.MappingNode:
		var raw map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := node.Decode(&raw); err != nil {
			return err
		}
		for name, dep := range raw {
			cond := dep.Condition
			if cond == "" {
				cond = "service_started"
			}
			out[name] = cond
		}
	default:
		return fmt.Errorf("line %d: depends_on must be a list or a map", node.Line)
	}
	*d = out
	return nil
}

// resolveAlias follows a YAML alias (`*name`) to the node it refers to.
func resolveAlias(node *yaml.Node) *yaml.Node {
	for node != nil && node.Kind == yaml.AliasNode {
		node = node.Alias
	}
	return node
}

// parseCompose decodes a Compose file.
func parseCompose(data []byte) (composeFile, error) {
	var c composeFile
	err := yaml.Unmarshal(data, &c)
	return c, err
}

// loadCompose reads and decodes ../docker-compose.yml, failing the test if it cannot.
func loadCompose(t *testing.T) composeFile {
	t.Helper()
	data, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatalf("read %s: %v", composePath, err)
	}
	c, err := parseCompose(data)
	if err != nil {
		t.Fatalf("parse %s: %v", composePath, err)
	}
	if len(c.Services) == 0 {
		t.Fatalf("%s defines no services", composePath)
	}
	return c
}

// loadApp returns the app service of ../docker-compose.yml, failing the test if it is missing.
func loadApp(t *testing.T) service {
	t.Helper()
	app, ok := loadCompose(t).Services[appService]
	if !ok {
		t.Fatalf("%s has no %q service", composePath, appService)
	}
	return app
}

// sortedNames returns the service names in order, so subtests run in a stable order.
func sortedNames(services map[string]service) []string {
	names := make([]string, 0, len(services))
	for name := range services {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// digestPattern matches an image digest such as sha256:<64 hex>.
var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// imageProblem says why an image reference is not pinned, or returns "" when it is: it must
// name an explicit tag other than latest, or a digest. An unpinned image makes
// `docker compose up` pull whatever was published last, so two runs may differ.
func imageProblem(ref string) string {
	ref = strings.TrimSpace(ref)
	switch {
	case ref == "":
		return "no image reference"
	case strings.Contains(ref, "$"):
		return "the reference uses a variable, so its tag cannot be checked; pin it literally"
	}
	if name, digest, ok := strings.Cut(ref, "@"); ok {
		if name == "" || !digestPattern.MatchString(digest) {
			return fmt.Sprintf("digest %q is not sha256:<64 lowercase hex>", digest)
		}
		return ""
	}
	// The tag follows the last colon of the last path component; an earlier colon is a
	// registry port (registry:5000/team/app).
	last := ref[strings.LastIndex(ref, "/")+1:]
	_, tag, ok := strings.Cut(last, ":")
	switch {
	case !ok || tag == "":
		return "no tag, so it means latest; pin an explicit version"
	case tag == "latest":
		return "the tag is latest; pin an explicit version"
	}
	return ""
}

func TestImageProblem(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		ref    string
		pinned bool
	}{
		{"mysql:8.4.3", true},
		{"apache/kafka:3.9.0", true},
		{"gcr.io/distroless/static-debian12:nonroot", true},
		{"registry.local:5000/team/app:1.2.3", true},
		{"redis@" + digest, true},
		{"redis:7.4.1@" + digest, true},
		{"redis", false},
		{"redis:", false},
		{"redis:latest", false},
		{"registry.local:5000/team/app", false},
		{"redis@sha256:short", false},
		{"redis:${REDIS_TAG}", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			why := imageProblem(tt.ref)
			if got := why == ""; got != tt.pinned {
				t.Errorf("imageProblem(%q) = %q; want pinned=%v", tt.ref, why, tt.pinned)
			}
		})
	}
}

// (a) Every image Compose pulls is pinned.
func TestComposeImagesArePinned(t *testing.T) {
	c := loadCompose(t)
	for _, name := range sortedNames(c.Services) {
		svc := c.Services[name]
		t.Run(name, func(t *testing.T) {
			if svc.Image == "" {
				if svc.Build == nil {
					t.Fatalf("service %s has neither image nor build", name)
				}
				return // Built from the Dockerfile, whose bases TestDockerfileBaseImagesArePinned checks.
			}
			if why := imageProblem(svc.Image); why != "" {
				t.Errorf("service %s image %q is not pinned: %s", name, svc.Image, why)
			}
		})
	}
}

// (a) Every base image of the Dockerfile is pinned too.
func TestDockerfileBaseImagesArePinned(t *testing.T) {
	stages := loadDockerfile(t)
	seen := map[string]bool{} // Earlier stage names, which a later FROM may refer to.
	for i, st := range stages {
		t.Run(fmt.Sprintf("stage%d_%s", i, st.base), func(t *testing.T) {
			switch {
			case seen[strings.ToLower(st.base)]:
				// Builds on an earlier stage, pinned where that stage is declared.
			case st.base == "scratch":
				// The empty image has nothing to pin.
			default:
				if why := imageProblem(st.base); why != "" {
					t.Errorf("%s:%d FROM %q is not pinned: %s", dockerfilePath, st.line, st.base, why)
				}
			}
		})
		if st.name != "" {
			seen[strings.ToLower(st.name)] = true
		}
	}
}

// (b) The app gets every variable that switches a dependency from embedded to external, and
// the values it needs with them. An empty value means "embedded" to the app, so it counts as
// missing.
func TestAppSetsRequiredEnvironment(t *testing.T) {
	app := loadApp(t)
	required := []struct {
		name string
		why  string
	}{
		{"ONCEPAY_MYSQL_DSN", "empty means the embedded SQLite file instead of the mysql service"},
		{"ONCEPAY_REDIS_ADDR", "empty means an in-process Redis instead of the redis service"},
		{"ONCEPAY_KAFKA_BROKERS", "empty means an in-process Kafka instead of the kafka service"},
		{"ONCEPAY_CHANNEL_SECRET", "unset means dev-channel-secret, which the app refuses with a real DB"},
		{"ONCEPAY_ADMIN_KEY", "unset means dev-admin-key, which the app refuses with a real DB"},
		{"ONCEPAY_HTTP_ADDR", "the app must listen on the port that ports: publishes"},
		{"ONCEPAY_CHANNEL_URL", "a real database refuses to start without a configured channel"},
		{"ONCEPAY_CHANNELS", "a real channel needs the list of channels oncepay hears"},
		{"ONCEPAY_PUBLIC_URL", "the channel calls back notify_url, built on it, from its own container"},
	}
	for _, tt := range required {
		t.Run(tt.name, func(t *testing.T) {
			v, ok := app.Environment[tt.name]
			switch {
			case !ok:
				t.Errorf("service %s does not set %s (%s)", appService, tt.name, tt.why)
			case !v.Set:
				t.Errorf("service %s passes %s through from the shell without a value, so it may be unset (%s); give a value or ${%s:?message}", appService, tt.name, tt.why, tt.name)
			case strings.TrimSpace(v.Value) == "":
				t.Errorf("service %s sets %s to an empty value (%s)", appService, tt.name, tt.why)
			}
		})
	}
}

// interpolation matches a value that is exactly one Compose variable: $NAME or ${NAME} with
// an optional modifier (:-, -, :?, ?, :+, +) and its argument.
var interpolation = regexp.MustCompile(`^\$(?:([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])(.*))?\})$`)

// secretProblem says why a secret's value in the Compose file is unsafe, or returns "" when
// it is taken from the shell and Compose refuses to start without it. A dev-* value, an empty
// one (which makes the app fall back to dev-*) or a literal committed to the file is unsafe.
func secretProblem(raw string) string {
	v := strings.TrimSpace(raw)
	switch {
	case v == "":
		return "empty, so the app falls back to its dev-* default"
	case strings.HasPrefix(v, "dev-"):
		return fmt.Sprintf("literal dev-* value %q", v)
	}
	m := interpolation.FindStringSubmatch(v)
	if m == nil {
		return "a literal secret committed to the file; take it from the shell with ${NAME:?message}"
	}
	name, op, arg := m[1]+m[2], m[3], m[4]
	switch op {
	case ":?", "?":
		return ""
	case ":-", "-":
		if strings.HasPrefix(strings.TrimSpace(arg), "dev-") {
			return fmt.Sprintf("defaults to dev-* value %q when %s is unset", arg, name)
		}
		return fmt.Sprintf("defaults to a literal when %s is unset; use ${%s:?message}", name, name)
	default:
		return fmt.Sprintf("becomes empty when %s is unset, and the app then falls back to dev-*; use ${%s:?message}", name, name)
	}
}

func TestSecretProblem(t *testing.T) {
	tests := []struct {
		value string
		safe  bool
	}{
		{"${ONCEPAY_ADMIN_KEY:?set ONCEPAY_ADMIN_KEY}", true},
		{"${ONCEPAY_ADMIN_KEY?required}", true},
		{"dev-admin-key", false},
		{" dev-channel-secret ", false},
		{"", false},
		{"hunter2", false},
		{"${ONCEPAY_ADMIN_KEY}", false},
		{"$ONCEPAY_ADMIN_KEY", false},
		{"${ONCEPAY_ADMIN_KEY:-dev-admin-key}", false},
		{"${ONCEPAY_ADMIN_KEY-hunter2}", false},
		{"${ONCEPAY_ADMIN_KEY:+x}", false},
		{"prefix-${ONCEPAY_ADMIN_KEY:?set it}", false},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			why := secretProblem(tt.value)
			if got := why == ""; got != tt.safe {
				t.Errorf("secretProblem(%q) = %q; want safe=%v", tt.value, why, tt.safe)
			}
		})
	}
}

// (c) The secrets are not the dev-* defaults, which the app refuses when the DB is real.
func TestAppSecretsAreNotDevDefaults(t *testing.T) {
	app := loadApp(t)
	for _, name := range []string{"ONCEPAY_CHANNEL_SECRET", "ONCEPAY_ADMIN_KEY"} {
		t.Run(name, func(t *testing.T) {
			v, ok := app.Environment[name]
			if !ok || !v.Set {
				t.Fatalf("service %s does not set %s; the app would fall back to its dev-* default", appService, name)
			}
			if why := secretProblem(v.Value); why != "" {
				t.Errorf("service %s %s=%q: %s", appService, name, v.Value, why)
			}
		})
	}
}

// (d) The app starts only once each dependency is healthy, and each dependency has a
// healthcheck that can become healthy.
func TestAppWaitsForHealthyDependencies(t *testing.T) {
	c := loadCompose(t)
	app, ok := c.Services[appService]
	if !ok {
		t.Fatalf("%s has no %q service", composePath, appService)
	}
	for _, dep := range []string{"mysql", "redis", "kafka", "channelsim"} {
		t.Run(dep, func(t *testing.T) {
			cond, ok := app.DependsOn[dep]
			switch {
			case !ok:
				t.Errorf("service %s does not depend_on %s", appService, dep)
			case cond != "service_healthy":
				t.Errorf("service %s depends_on %s with condition %q; want service_healthy, or it may start before %s accepts connections", appService, dep, cond, dep)
			}
			svc, ok := c.Services[dep]
			if !ok {
				t.Fatalf("%s has no %q service", composePath, dep)
			}
			if why := healthcheckProblem(svc.Healthcheck); why != "" {
				t.Errorf("service %s healthcheck: %s; service_healthy would never be reached", dep, why)
			}
		})
	}
}

// healthcheckProblem says why a healthcheck cannot report healthy, or returns "".
func healthcheckProblem(h *healthcheck) string {
	if h == nil {
		return "missing"
	}
	if h.Disable {
		return "disabled"
	}
	switch test := h.Test.(type) {
	case string:
		if strings.TrimSpace(test) == "" {
			return "empty test"
		}
	case []any:
		if len(test) == 0 || fmt.Sprint(test[0]) == "NONE" {
			return "test is empty or NONE"
		}
		if len(test) == 1 {
			return fmt.Sprintf("test %v has no command after %v", test, test[0])
		}
	default:
		return "no test"
	}
	return ""
}

func TestComposeDecodesBothForms(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		env     environment
		depends dependsOn
	}{
		{
			name: "maps",
			yaml: "services:\n  app:\n    environment:\n      A: \"1\"\n      B: 2\n      C:\n    depends_on:\n      db:\n        condition: service_healthy\n",
			env:  environment{"A": {"1", true}, "B": {"2", true}, "C": {}},
			depends: dependsOn{
				"db": "service_healthy",
			},
		},
		{
			name:    "lists",
			yaml:    "services:\n  app:\n    environment:\n      - A=1\n      - B=x=y\n      - C\n    depends_on: [db]\n",
			env:     environment{"A": {"1", true}, "B": {"x=y", true}, "C": {}},
			depends: dependsOn{"db": "service_started"},
		},
		{
			name:    "merge keys",
			yaml:    "x-app: &app\n  depends_on: [db]\nx-env: &env\n  A: \"1\"\n  B: \"2\"\nservices:\n  app:\n    <<: *app\n    environment:\n      B: \"3\"\n      <<: *env\n      C: \"4\"\n",
			env:     environment{"A": {"1", true}, "B": {"3", true}, "C": {"4", true}},
			depends: dependsOn{"db": "service_started"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseCompose([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("parseCompose: %v", err)
			}
			app := c.Services["app"]
			if fmt.Sprint(app.Environment) != fmt.Sprint(tt.env) {
				t.Errorf("environment = %v; want %v", app.Environment, tt.env)
			}
			if fmt.Sprint(app.DependsOn) != fmt.Sprint(tt.depends) {
				t.Errorf("depends_on = %v; want %v", app.DependsOn, tt.depends)
			}
		})
	}
}

// (e) The DSN asks go-sql-driver to parse DATETIME columns into time.Time; without it
// scanning created_at, expires_at and paid_at fails.
func TestAppMySQLDSNParsesTime(t *testing.T) {
	v := loadApp(t).Environment["ONCEPAY_MYSQL_DSN"]
	if why := dsnProblem(v.Value); why != "" {
		t.Errorf("service %s ONCEPAY_MYSQL_DSN=%q: %s", appService, v.Value, why)
	}
}

// dsnProblem says why a go-sql-driver DSN lacks parseTime=true, or returns "".
func dsnProblem(dsn string) string {
	_, query, ok := strings.Cut(dsn, "?")
	if !ok {
		return "no parameters; add ?parseTime=true"
	}
	params, err := url.ParseQuery(query)
	if err != nil {
		return fmt.Sprintf("parameters do not parse: %v", err)
	}
	if on, err := strconv.ParseBool(params.Get("parseTime")); err != nil || !on {
		return "parseTime is not true; add parseTime=true"
	}
	return ""
}

func TestDSNProblem(t *testing.T) {
	tests := []struct {
		dsn string
		ok  bool
	}{
		{"root:pw@tcp(mysql:3306)/oncepay?parseTime=true&loc=UTC", true},
		{"root:pw@tcp(mysql:3306)/oncepay?loc=UTC&parseTime=true", true},
		{"root:pw@tcp(mysql:3306)/oncepay", false},
		{"root:pw@tcp(mysql:3306)/oncepay?loc=UTC", false},
		{"root:pw@tcp(mysql:3306)/oncepay?parseTime=false", false},
		{"root:pw@tcp(mysql:3306)/oncepay?noparseTime=true", false},
	}
	for _, tt := range tests {
		t.Run(tt.dsn, func(t *testing.T) {
			why := dsnProblem(tt.dsn)
			if got := why == ""; got != tt.ok {
				t.Errorf("dsnProblem(%q) = %q; want ok=%v", tt.dsn, why, tt.ok)
			}
		})
	}
}

// instruction is one logical Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // Upper-case keyword, such as RUN.
	args string
	line int // Line where the instruction starts.
}

// stage is one FROM of a Dockerfile with the instructions that follow it.
type stage struct {
	base   string // The image or earlier stage after FROM.
	name   string // The name after AS, or "".
	line   int
	instrs []instruction
}

// parseDockerfile splits a Dockerfile into stages of instructions. It joins lines ending in
// a backslash, drops comments and blank lines, and skips FROM flags such as --platform.
func parseDockerfile(text string) ([]stage, error) {
	var (
		stages  []stage
		pending strings.Builder
		start   int
	)
	flush := func() error {
		logical := strings.TrimSpace(pending.String())
		pending.Reset()
		if logical == "" {
			return nil
		}
		cmd, args, _ := strings.Cut(logical, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			st, err := parseFrom(in)
			if err != nil {
				return err
			}
			stages = append(stages, st)
			return nil
		}
		if len(stages) == 0 {
			if in.cmd == "ARG" {
				return nil // A global ARG may precede the first FROM.
			}
			return fmt.Errorf("line %d: %s before the first FROM", in.line, in.cmd)
		}
		last := &stages[len(stages)-1]
		last.instrs = append(last.instrs, in)
		return nil
	}
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue // Blank lines and comments, also inside a continued instruction, are dropped.
		}
		if pending.Len() == 0 {
			start = i + 1
		}
		if body, cont := strings.CutSuffix(trimmed, `\`); cont {
			pending.WriteString(body + " ")
			continue
		}
		pending.WriteString(trimmed)
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("no FROM")
	}
	return stages, nil
}

// parseFrom reads `FROM [--flag=value...] image [AS name]`.
func parseFrom(in instruction) (stage, error) {
	var fields []string
	for _, f := range strings.Fields(in.args) {
		if !strings.HasPrefix(f, "--") {
			fields = append(fields, f)
		}
	}
	st := stage{line: in.line}
	switch {
	case len(fields) == 1:
		st.base = fields[0]
	case len(fields) == 3 && strings.EqualFold(fields[1], "AS"):
		st.base, st.name = fields[0], fields[2]
	default:
		return st, fmt.Errorf("line %d: cannot read FROM %s", in.line, in.args)
	}
	return st, nil
}

// loadDockerfile reads and parses ../Dockerfile, failing the test if it cannot.
func loadDockerfile(t *testing.T) []stage {
	t.Helper()
	data, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatalf("read %s: %v", dockerfilePath, err)
	}
	stages, err := parseDockerfile(string(data))
	if err != nil {
		t.Fatalf("parse %s: %v", dockerfilePath, err)
	}
	return stages
}

// userProblem says why a stage may run as root, or returns "". The last USER decides; it
// must be nonroot or a numeric uid other than 0, since any other name cannot be checked here.
func userProblem(st stage) string {
	user := ""
	for _, in := range st.instrs {
		if in.cmd == "USER" {
			user = in.args
		}
	}
	if user == "" {
		return "no USER instruction, so the image's default user applies; add USER nonroot:nonroot"
	}
	name, _, _ := strings.Cut(strings.TrimSpace(user), ":")
	if name == "nonroot" {
		return ""
	}
	uid, err := strconv.Atoi(name)
	switch {
	case name == "root" || (err == nil && uid == 0):
		return fmt.Sprintf("USER %s is root", user)
	case err != nil:
		return fmt.Sprintf("USER %s cannot be checked to be non-root; use nonroot or a numeric uid", user)
	}
	return ""
}

func TestUserProblem(t *testing.T) {
	tests := []struct {
		name    string
		users   []string
		nonRoot bool
	}{
		{"nonroot", []string{"nonroot:nonroot"}, true},
		{"nonroot user only", []string{"nonroot"}, true},
		{"uid", []string{"65532:65532"}, true},
		{"last wins", []string{"root", "65532"}, true},
		{"none", nil, false},
		{"root", []string{"root"}, false},
		{"uid 0", []string{"0:0"}, false},
		{"back to root", []string{"nonroot", "0"}, false},
		{"variable", []string{"$APP_UID"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st stage
			for _, u := range tt.users {
				st.instrs = append(st.instrs, instruction{cmd: "USER", args: u})
			}
			why := userProblem(st)
			if got := why == ""; got != tt.nonRoot {
				t.Errorf("userProblem(USER %v) = %q; want non-root=%v", tt.users, why, tt.nonRoot)
			}
		})
	}
}

// (f) The final stage, the image that runs, does not run as root.
func TestDockerfileFinalStageIsNonRoot(t *testing.T) {
	stages := loadDockerfile(t)
	final := stages[len(stages)-1]
	if why := userProblem(final); why != "" {
		t.Errorf("%s final stage (FROM %s, line %d): %s", dockerfilePath, final.base, final.line, why)
	}
}

var (
	// goBuild finds a `go build` command within a shell command line.
	goBuild = regexp.MustCompile(`(^|\s)go\s+build(\s|$)`)
	// cgoOff finds CGO_ENABLED=0 as an assignment, or as ENV's legacy `CGO_ENABLED 0` form.
	cgoOff = regexp.MustCompile(`(^|\s)CGO_ENABLED[= ]0(\s|$)`)
	// shellSeparator splits a RUN line into the commands it chains.
	shellSeparator = regexp.MustCompile(`&&|\|\||;`)
)

// cgoProblems lists each `go build` of a stage that may run with cgo, which would link the
// binary against libc that distroless/static lacks. CGO_ENABLED=0 counts when set by an
// earlier ENV of the stage, earlier in the same RUN (export), or on the command itself.
func cgoProblems(st stage) (builds int, problems []string) {
	envOff := false
	for _, in := range st.instrs {
		switch in.cmd {
		case "ENV":
			if cgoOff.MatchString(in.args) {
				envOff = true
			}
		case "RUN":
			runOff := envOff
			for _, cmd := range shellSeparator.Split(in.args, -1) {
				if !goBuild.MatchString(cmd) {
					if cgoOff.MatchString(cmd) {
						runOff = true // export CGO_ENABLED=0 before the build.
					}
					continue
				}
				builds++
				if !runOff && !cgoOff.MatchString(cmd) {
					problems = append(problems, fmt.Sprintf("line %d: %q does not set CGO_ENABLED=0", in.line, strings.TrimSpace(cmd)))
				}
			}
		}
	}
	return builds, problems
}

func TestCgoProblems(t *testing.T) {
	tests := []struct {
		name     string
		instrs   []instruction
		builds   int
		problems int
	}{
		{"inline", []instruction{{cmd: "RUN", args: "CGO_ENABLED=0 go build -o /out/a ./cmd/a && CGO_ENABLED=0 go build -o /out/b ./cmd/b"}}, 2, 0},
		{"env", []instruction{{cmd: "ENV", args: "CGO_ENABLED=0"}, {cmd: "RUN", args: "go build ./cmd/a"}}, 1, 0},
		{"legacy env", []instruction{{cmd: "ENV", args: "CGO_ENABLED 0"}, {cmd: "RUN", args: "go build ./cmd/a"}}, 1, 0},
		{"export", []instruction{{cmd: "RUN", args: "export CGO_ENABLED=0 && go build ./cmd/a"}}, 1, 0},
		{"missing", []instruction{{cmd: "RUN", args: "go build ./cmd/a"}}, 1, 1},
		{"only first", []instruction{{cmd: "RUN", args: "CGO_ENABLED=0 go build ./cmd/a && go build ./cmd/b"}}, 2, 1},
		{"cgo on", []instruction{{cmd: "RUN", args: "CGO_ENABLED=1 go build ./cmd/a"}}, 1, 1},
		{"env after", []instruction{{cmd: "RUN", args: "go build ./cmd/a"}, {cmd: "ENV", args: "CGO_ENABLED=0"}}, 1, 1},
		{"no build", []instruction{{cmd: "RUN", args: "go mod download"}}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			builds, problems := cgoProblems(stage{instrs: tt.instrs})
			if builds != tt.builds || len(problems) != tt.problems {
				t.Errorf("cgoProblems = %d builds, problems %q; want %d builds, %d problems", builds, problems, tt.builds, tt.problems)
			}
		})
	}
}

// (f) Every `go build` runs with CGO_ENABLED=0, so the binaries are static.
func TestDockerfileBuildsWithoutCgo(t *testing.T) {
	total := 0
	for _, st := range loadDockerfile(t) {
		builds, problems := cgoProblems(st)
		total += builds
		for _, p := range problems {
			t.Errorf("%s stage FROM %s: %s; the binary would need libc, which distroless/static lacks", dockerfilePath, st.base, p)
		}
	}
	if total == 0 {
		t.Errorf("%s runs no `go build`", dockerfilePath)
	}
}

// (g) The module download layer has every module go.mod replaces with a directory of the
// repository (the idempotency kit, ./idempotent): go mod download reads the replacement's
// go.mod, and fails without it, before the sources are copied.
func TestDockerfileDownloadsWithTheReplacedModules(t *testing.T) {
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, m := range regexp.MustCompile(`(?m)=>\s*(\./\S*|\.\./\S*)\s*$`).FindAllStringSubmatch(string(gomod), -1) {
		dirs = append(dirs, strings.TrimSuffix(strings.TrimPrefix(m[1], "./"), "/"))
	}
	if len(dirs) == 0 {
		t.Fatal("go.mod replaces no module with a directory: is ./idempotent no longer its own module?")
	}
	downloads := 0
	for _, st := range loadDockerfile(t) {
		copied := map[string]bool{}
		for _, in := range st.instrs {
			if in.cmd == "COPY" {
				for _, f := range strings.Fields(in.args) {
					copied[f] = true
				}
			}
			if in.cmd != "RUN" || !strings.Contains(in.args, "go mod download") {
				continue
			}
			downloads++
			for _, dir := range dirs {
				for _, f := range []string{dir + "/go.mod", dir + "/go.sum"} {
					if !copied[f] {
						t.Errorf("%s line %d: go mod download runs before %s is copied in (go.mod replaces a module with ./%s)", dockerfilePath, in.line, f, dir)
					}
				}
			}
		}
	}
	if downloads == 0 {
		t.Errorf("%s has no go mod download layer", dockerfilePath)
	}
}

// TestChannelSimulatorIsItsOwnServiceOnTheHost: the simulator runs as a service of its own
// (never a channel embedded silently in the app), shares the app's channel secret, and its
// cashier page — the pay_url the app hands out — is published on the host at the port and
// public URL it puts in pay_url; the app's ONCEPAY_CHANNEL_URL reaches it by service name.
func TestChannelSimulatorIsItsOwnServiceOnTheHost(t *testing.T) {
	raw, err := os.ReadFile(composePath)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Entrypoint  []string    `yaml:"entrypoint"`
			Command     []string    `yaml:"command"`
			Ports       []string    `yaml:"ports"`
			Environment environment `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	sim, ok := c.Services["channelsim"]
	if !ok || len(sim.Entrypoint) != 1 || sim.Entrypoint[0] != "/channelsim" {
		t.Fatalf("channelsim service %+v: want one running /channelsim", sim)
	}
	flag := func(name string) string {
		for i := 0; i+1 < len(sim.Command); i++ {
			if sim.Command[i] == name {
				return sim.Command[i+1]
			}
		}
		return ""
	}
	public, err := url.Parse(flag("-public-url"))
	if err != nil || public.Hostname() != "localhost" {
		t.Fatalf("-public-url %q: want http://localhost:<port>, which a browser on the host opens", flag("-public-url"))
	}
	if want := public.Port() + ":" + strings.TrimPrefix(flag("-addr"), ":"); !slices.Contains(sim.Ports, want) {
		t.Errorf("ports %v: want %q, the port pay_url names published to the listen port", sim.Ports, want)
	}
	app := c.Services[appService]
	if got := app.Environment["ONCEPAY_CHANNEL_URL"].Value; got != "http://channelsim"+flag("-addr") {
		t.Errorf("app ONCEPAY_CHANNEL_URL = %q, want the simulator by service name, http://channelsim%s", got, flag("-addr"))
	}
	if sim.Environment["ONCEPAY_CHANNEL_SECRET"] != app.Environment["ONCEPAY_CHANNEL_SECRET"] {
		t.Errorf("the simulator's secret %v differs from the app's %v: every report would be refused", sim.Environment["ONCEPAY_CHANNEL_SECRET"], app.Environment["ONCEPAY_CHANNEL_SECRET"])
	}
}
