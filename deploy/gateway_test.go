package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// nginxConfPath is the gateway's configuration, relative to this package's directory.
const nginxConfPath = "nginx/nginx.conf"

// gatewayService is the compose service that runs nginx in front of the instances.
const gatewayService = "gateway"

// oncepayInstances returns the compose services that run oncepay itself: built from the
// Dockerfile with its default entrypoint and command (the migrate service runs `migrate`).
func oncepayInstances(t *testing.T, c composeFile) []string {
	t.Helper()
	var names []string
	for _, name := range sortedNames(c.Services) {
		svc := c.Services[name]
		if svc.Build != nil && svc.Environment["ONCEPAY_NODE_ID"].Set && name != "migrate" {
			names = append(names, name)
		}
	}
	if len(names) < 2 {
		t.Fatalf("%s runs %d oncepay instances %v, want several behind the gateway", composePath, len(names), names)
	}
	return names
}

// loadNginxConf reads deploy/nginx/nginx.conf without its comments.
func loadNginxConf(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(nginxConfPath)
	if err != nil {
		t.Fatalf("read %s: %v", nginxConfPath, err)
	}
	return regexp.MustCompile(`(?m)#.*$`).ReplaceAllString(string(b), "")
}

// upstreamServer matches a server line of an upstream block, e.g. `server app-2:8080 max_fails=0;`.
var upstreamServer = regexp.MustCompile(`(?m)^\s*server\s+([A-Za-z0-9_.-]+):(\d+)[^;]*;`)

// The gateway fronts every instance and only those: each instance of the compose file is an
// upstream server of nginx.conf on its ONCEPAY_HTTP_ADDR port, each has its own
// ONCEPAY_NODE_ID (ids are generated per instance), and each gives the channel the gateway
// as its public URL, so that notifications come through the gateway too.
func TestGatewayFrontsEveryInstance(t *testing.T) {
	c := loadCompose(t)
	gw, ok := c.Services[gatewayService]
	if !ok {
		t.Fatalf("%s has no %q service", composePath, gatewayService)
	}
	if !strings.HasPrefix(gw.Image, "nginx:") {
		t.Errorf("the gateway's image is %q, want nginx (its configuration is %s)", gw.Image, nginxConfPath)
	}
	instances := oncepayInstances(t, c)
	var servers []string
	for _, m := range upstreamServer.FindAllStringSubmatch(loadNginxConf(t), -1) {
		servers = append(servers, m[1]+":"+m[2])
	}
	sort.Strings(servers)
	var want []string
	ids := map[string]string{}
	for _, name := range instances {
		env := c.Services[name].Environment
		_, port, _ := strings.Cut(env["ONCEPAY_HTTP_ADDR"].Value, ":")
		want = append(want, name+":"+port)
		id := env["ONCEPAY_NODE_ID"].Value
		if other, dup := ids[id]; dup {
			t.Errorf("%s and %s share ONCEPAY_NODE_ID=%s: their ids would collide", other, name, id)
		}
		ids[id] = name
		if u := env["ONCEPAY_PUBLIC_URL"].Value; !strings.HasPrefix(u, "http://"+gatewayService+":") {
			t.Errorf("%s: ONCEPAY_PUBLIC_URL=%q, want the gateway's, so that the channel's notifications pass it", name, u)
		}
		if _, dep := gw.DependsOn[name]; !dep {
			t.Errorf("the gateway does not depend on %s: nginx resolves its upstreams when it starts", name)
		}
	}
	sort.Strings(want)
	if !slices.Equal(servers, want) {
		t.Errorf("%s upstream servers %v, want the compose instances %v", nginxConfPath, servers, want)
	}
}

// The gateway is the one of I11: it retries after an error or a timeout on the next
// instance, POST included; it generates X-Request-Id where the client sent none and passes
// it on; its read timeout is shorter than the slowest work of an instance (a channel call of
// ONCEPAY_CHANNEL_TIMEOUT, 5 s, per attempt); and its access log names every instance a
// request was sent to, with each one's status.
func TestGatewayRetriesPOSTAndKeepsTheRequestID(t *testing.T) {
	conf := loadNginxConf(t)
	directive := func(name string) []string {
		m := regexp.MustCompile(`(?m)^\s*` + name + `\s+([^;]*);`).FindStringSubmatch(conf)
		if m == nil {
			t.Fatalf("%s has no %s directive", nginxConfPath, name)
		}
		return strings.Fields(m[1])
	}
	next := directive("proxy_next_upstream")
	for _, want := range []string{"error", "timeout", "non_idempotent"} {
		if !slices.Contains(next, want) {
			t.Errorf("proxy_next_upstream %v lacks %s", next, want)
		}
	}
	if got, err := time.ParseDuration(directive("proxy_read_timeout")[0]); err != nil || got > 5*time.Second {
		t.Errorf("proxy_read_timeout %s (%v), want at most the 5 s of one attempt of a channel call", got, err)
	}
	if rid := directive("proxy_set_header X-Request-Id"); rid[0] != "$oncepay_request_id" {
		t.Errorf("X-Request-Id is passed on as %v, want $oncepay_request_id", rid)
	}
	if !regexp.MustCompile(`map\s+\$http_x_request_id\s+\$oncepay_request_id\s*\{\s*""\s+\$request_id;\s*default\s+\$http_x_request_id;`).MatchString(conf) {
		t.Errorf("%s does not map an absent X-Request-Id to $request_id and keep the client's", nginxConfPath)
	}
	format := regexp.MustCompile(`log_format\s+oncepay\s+([^;]*);`).FindStringSubmatch(conf)
	if format == nil {
		t.Fatalf("%s has no log_format oncepay", nginxConfPath)
	}
	for _, v := range []string{"$oncepay_request_id", "$upstream_addr", "$upstream_status"} {
		if !strings.Contains(format[1], v) {
			t.Errorf("log_format oncepay lacks %s", v)
		}
	}
}

// nginx itself accepts the configuration (nginx -t), with the instances' names, which only
// Docker's DNS resolves, replaced by 127.0.0.1. Without nginx the test is skipped, and fails
// in CI, where .ci/run installs it.
func TestGatewayConfigIsValid(t *testing.T) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("nginx is not on PATH but CI=true: %v", err)
		}
		t.Skip("needs nginx on PATH (Debian: apt-get install nginx)")
	}
	prefix := t.TempDir()
	conf := regexp.MustCompile(`(?m)^(\s*server\s+)[A-Za-z0-9_.-]+(:\d+)`).ReplaceAllString(loadNginxConf(t), "${1}127.0.0.1${2}")
	conf = strings.Replace(conf, "listen 8080;", "listen 127.0.0.1:8801;", 1)
	path := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-t", "-p", prefix, "-c", path, "-e", filepath.Join(prefix, "error.log"),
		"-g", "pid "+filepath.Join(prefix, "nginx.pid")+";").CombinedOutput()
	if err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
}
