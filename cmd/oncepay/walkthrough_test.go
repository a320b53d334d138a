package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// The addresses docs/walkthrough.md is written for (those of `make run`, and the example
// receiver's default). The runner gives each run free ports instead and replaces these in the
// commands and in the expected output: the one change it makes to the page.
const (
	docBase = "127.0.0.1:8080"
	docSim  = "127.0.0.1:18090"
	docHook = "127.0.0.1:8089"
)

// TestWalkthrough runs docs/walkthrough.md, and the README's "Each defense, seen in action",
// as a reader would, twice, each page each time against a fresh bin/oncepay with its embedded
// defaults (SQLite, miniredis, kfake, the channel simulator) on free ports and a fresh data
// directory: every command of its console blocks in one bash, in order, and each command's
// output compared with what the page shows under it (see compareOutput for what "the same"
// means). The pages wait where the product is asynchronous with poll loops a reader runs too;
// the runner adds no sleep of its own.
func TestWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs the walkthrough twice")
	}
	for _, tool := range []string{"bash", "curl", "jq", "openssl", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("the walkthrough needs %s on PATH: %v", tool, err)
			}
			t.Skipf("the walkthrough needs %s on PATH: %v", tool, err)
		}
	}
	pages := []struct {
		path     string
		minSteps int
	}{{"README.md", 10}, {"docs/walkthrough.md", 60}}
	steps := map[string][]step{}
	for _, p := range pages {
		text, err := os.ReadFile(filepath.Join("..", "..", p.path))
		if err != nil {
			t.Fatal(err)
		}
		steps[p.path] = parseSteps(string(text))
		if n := len(steps[p.path]); n < p.minSteps {
			t.Fatalf("%s has %d console commands, want at least %d: the parser or the page is broken", p.path, n, p.minSteps)
		}
	}
	bin := buildBinary(t)
	for run := 1; run <= 2; run++ {
		for _, p := range pages {
			t.Run(fmt.Sprintf("run%d/%s", run, filepath.Base(p.path)), func(t *testing.T) {
				start := time.Now()
				runWalkthrough(t, bin, p.path, steps[p.path])
				t.Logf("%s, run %d: %d commands in %v", p.path, run, len(steps[p.path]), time.Since(start).Round(time.Millisecond))
			})
		}
	}
}

// step is one command of the page (a `$ ` line and its `\` continuations) and the lines shown
// under it up to the next command or the end of its block.
type step struct {
	line     int // of the page, 1-based
	command  string
	expected []string
}

// parseSteps reads every ```console block of page.
func parseSteps(page string) []step {
	var steps []step
	in := false
	lines := strings.Split(page, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case !in && strings.TrimSpace(l) == "```console":
			in = true
		case in && strings.TrimSpace(l) == "```":
			in = false
		case in && strings.HasPrefix(l, "$ "):
			s := step{line: i + 1, command: strings.TrimPrefix(l, "$ ")}
			for strings.HasSuffix(s.command, `\`) && i+1 < len(lines) {
				i++
				s.command += "\n" + lines[i]
			}
			steps = append(steps, s)
		case in && len(steps) > 0:
			steps[len(steps)-1].expected = append(steps[len(steps)-1].expected, l)
		}
	}
	return steps
}

// runWalkthrough starts a fresh server and runs the steps of page against it in one bash.
func runWalkthrough(t *testing.T, bin, page string, steps []step) {
	addrs := map[string]string{docBase: testenv.FreeAddr(t), docSim: testenv.FreeAddr(t), docHook: testenv.FreeAddr(t)}
	replace := func(s string) string {
		for doc, real := range addrs {
			s = strings.ReplaceAll(s, doc, real)
		}
		return s
	}
	startServer(t, bin, addrs[docBase], addrs[docSim])

	out := t.TempDir()
	var script strings.Builder
	script.WriteString("cd ../..\n") // the repository's root, where a reader stands
	for i, s := range steps {
		fmt.Fprintf(&script, "{ %s\n} >%s 2>&1; echo $? >%s\n", replace(s.command),
			filepath.Join(out, fmt.Sprintf("%03d.out", i)), filepath.Join(out, fmt.Sprintf("%03d.rc", i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "-c", script.String())
	sh.Env = withoutOncepay(os.Environ())
	// Its own process group, so that what the page starts in the background (the example
	// receiver) is stopped with it.
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	sh.Cancel = func() error { return syscall.Kill(-sh.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	sh.Stderr = &stderr
	err := sh.Run()
	if sh.Process != nil {
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGTERM)
	}
	if err != nil {
		t.Errorf("bash: %v\n%s", err, stderr.String())
	}
	if dir := os.Getenv("ONCEPAY_WALKTHROUGH_OUT"); dir != "" {
		// Where to keep this run's outputs, to refresh the page's from one real run.
		dir = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
		_ = os.CopyFS(dir, os.DirFS(out))
		_ = os.WriteFile(filepath.Join(dir, "addrs"), []byte(fmt.Sprintf("%s %s %s", addrs[docBase], addrs[docSim], addrs[docHook])), 0o644)
	}
	for i, s := range steps {
		rc, errRC := os.ReadFile(filepath.Join(out, fmt.Sprintf("%03d.rc", i)))
		got, _ := os.ReadFile(filepath.Join(out, fmt.Sprintf("%03d.out", i)))
		if errRC != nil {
			t.Fatalf("%s:%d never finished (the run timed out):\n$ %s\n%s", page, s.line, s.command, got)
		}
		if code := strings.TrimSpace(string(rc)); code != "0" {
			t.Errorf("%s:%d exited %s:\n$ %s\n%s", page, s.line, code, s.command, got)
			continue
		}
		want := strings.Split(replace(strings.Join(s.expected, "\n")), "\n")
		if len(s.expected) == 0 {
			want = nil
		}
		if diff := compareOutput(want, string(got)); diff != "" {
			t.Errorf("%s:%d: %s\n$ %s\n--- the page shows\n%s\n--- the server answered\n%s",
				page, s.line, diff, s.command, strings.Join(want, "\n"), got)
		}
	}
}

// startServer starts bin with its embedded defaults on addr, the channel simulator on sim and
// the embedded Redis and Kafka on free ports, in a fresh data directory; it stops it when the
// test ends.
func startServer(t *testing.T, bin, addr, sim string) {
	t.Helper()
	env := cleanEnv(map[string]string{
		"ONCEPAY_HTTP_ADDR":             addr,
		"ONCEPAY_EMBEDDED_CHANNEL_ADDR": sim,
		"ONCEPAY_EMBEDDED_REDIS_ADDR":   testenv.FreeAddr(t),
		"ONCEPAY_EMBEDDED_KAFKA_ADDR":   testenv.FreeAddr(t),
		"ONCEPAY_DATA_DIR":              t.TempDir(),
	})
	if testenv.StartProcess(t, "the server", bin, addr, env) == "" {
		t.FailNow()
	}
}

func withoutOncepay(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "ONCEPAY_") {
			out = append(out, kv)
		}
	}
	return out
}

// compareOutput says how got differs from the lines the page shows, or "" when it does not.
//
// An HTTP answer (the page's first line starts with "HTTP/") must have the same status line and
// every header the page shows; a line "…" stands for headers the page leaves out, and the body
// is compared only when the page shows one. Other output is compared line by line: JSON by its
// shape and values, any other line as text. In both, what differs from run to run is left out
// of the comparison: ids and other runs of ten or more digits, times, request ids, secrets and
// tokens, and the milliseconds a call took (keys ending in _ms).
func compareOutput(want []string, got string) string {
	gotLines := splitLines(got)
	if len(want) > 0 && strings.HasPrefix(want[0], "HTTP/") {
		return compareHTTP(want, gotLines)
	}
	return compareLines(want, gotLines)
}

func splitLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		out = append(out, strings.TrimRight(sc.Text(), "\r"))
	}
	return out
}

func compareHTTP(want, got []string) string {
	wantHead, wantBody, elided := splitHTTP(want)
	gotHead, gotBody, _ := splitHTTP(got)
	if len(gotHead) == 0 || normalize(gotHead[0]) != normalize(wantHead[0]) {
		return fmt.Sprintf("status line %q, the page shows %q", first(gotHead), wantHead[0])
	}
	headers := map[string]string{}
	for _, h := range gotHead[1:] {
		name, value, _ := strings.Cut(h, ":")
		headers[strings.ToLower(name)] = strings.TrimSpace(value)
	}
	for _, h := range wantHead[1:] {
		name, value, _ := strings.Cut(h, ":")
		v, ok := headers[strings.ToLower(name)]
		if !ok {
			return fmt.Sprintf("no header %s", name)
		}
		if normalize(v) != normalize(strings.TrimSpace(value)) {
			return fmt.Sprintf("header %s: %q, the page shows %q", name, v, strings.TrimSpace(value))
		}
	}
	if !elided && len(gotHead) != len(wantHead) {
		return fmt.Sprintf("%d header lines, the page shows %d and no …", len(gotHead)-1, len(wantHead)-1)
	}
	if len(wantBody) == 0 {
		return ""
	}
	return compareLines(wantBody, gotBody)
}

// splitHTTP splits an answer into its status line and headers, and its body: the headers end
// at a blank line, at a line that opens JSON, or at the page's "…".
func splitHTTP(lines []string) (head, body []string, elided bool) {
	for i, l := range lines {
		switch {
		case l == "…":
			elided = true
			return head, lines[i+1:], elided
		case l == "", strings.HasPrefix(l, "{"), strings.HasPrefix(l, "["):
			if l == "" {
				return head, lines[i+1:], elided
			}
			return head, lines[i:], elided
		}
		head = append(head, l)
	}
	return head, nil, elided
}

func first(l []string) string {
	if len(l) == 0 {
		return ""
	}
	return l[0]
}

func compareLines(want, got []string) string {
	if len(want) != len(got) {
		return fmt.Sprintf("%d lines, the page shows %d", len(got), len(want))
	}
	for i := range want {
		var w, g any
		if isJSON(want[i], &w) && isJSON(got[i], &g) {
			if d := compareJSON("", w, g); d != "" {
				return fmt.Sprintf("line %d: %s", i+1, d)
			}
			continue
		}
		if normalize(want[i]) != normalize(got[i]) {
			return fmt.Sprintf("line %d differs", i+1)
		}
	}
	return ""
}

func isJSON(line string, v *any) bool {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "{") && !strings.HasPrefix(line, "[") {
		return false
	}
	d := json.NewDecoder(strings.NewReader(line))
	d.UseNumber()
	return d.Decode(v) == nil && !d.More()
}

// compareJSON compares the page's value w with the answer's g at path: the same type, the same
// keys, the same length, and the same values but for what differs from run to run.
func compareJSON(path string, w, g any) string {
	if fmt.Sprintf("%T", w) != fmt.Sprintf("%T", g) {
		return fmt.Sprintf("%s is %T, the page shows %T", orTop(path), g, w)
	}
	switch w := w.(type) {
	case map[string]any:
		g := g.(map[string]any)
		for k := range w {
			if _, ok := g[k]; !ok {
				return fmt.Sprintf("%s has no key %q", orTop(path), k)
			}
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				return fmt.Sprintf("%s has a key %q the page does not show", orTop(path), k)
			}
			if d := compareJSON(path+"."+k, w[k], g[k]); d != "" {
				return d
			}
		}
	case []any:
		g := g.([]any)
		if len(w) != len(g) {
			return fmt.Sprintf("%s has %d elements, the page shows %d", orTop(path), len(g), len(w))
		}
		for i := range w {
			if d := compareJSON(fmt.Sprintf("%s[%d]", path, i), w[i], g[i]); d != "" {
				return d
			}
		}
	case json.Number:
		if !strings.HasSuffix(path, "_ms") && w != g.(json.Number) {
			return fmt.Sprintf("%s is %s, the page shows %s", path, g, w)
		}
	case string:
		if normalize(w) != normalize(g.(string)) {
			return fmt.Sprintf("%s is %q, the page shows %q", path, g, w)
		}
	default:
		if w != g {
			return fmt.Sprintf("%s is %v, the page shows %v", path, g, w)
		}
	}
	return ""
}

func orTop(path string) string {
	if path == "" {
		return "the value"
	}
	return path
}

// volatile matches what differs from one run to the next in an answer.
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "<time>"},
	{regexp.MustCompile(`req_[0-9a-f]+`), "req_<id>"},
	{regexp.MustCompile(`(whsec|tok)_[0-9A-Za-z_+/=-]+`), "${1}_<secret>"},
	{regexp.MustCompile(`\d{10,}`), "<n>"},
}

func normalize(s string) string {
	for _, v := range volatile {
		s = v.re.ReplaceAllString(s, v.with)
	}
	return s
}
