package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// buildBinary compiles cmd/oncepay into a temporary directory and returns its path, so that
// the tests see exactly what an operator runs: the exit code and stderr of the real binary.
func buildBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command on PATH to build the binary: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "oncepay")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// cleanEnv is the environment the binary runs with: only what a process needs to exist,
// plus vars, so that ONCEPAY_* variables of the test run cannot leak into the case.
func cleanEnv(vars map[string]string) []string {
	var env []string
	for _, name := range []string{"PATH", "HOME", "TMPDIR", "GOCACHE", "SYSTEMROOT"} {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// TestBadConfigurationExits runs the built binary with each bad configuration of the
// contract and checks that it refuses to start: a non-zero exit, one actionable stderr line
// per problem naming the variable, and nothing opened (no data directory created).
func TestBadConfigurationExits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	tests := []struct {
		name string
		vars map[string]string
		// lines holds, for each stderr line the case must produce, substrings it contains.
		lines [][]string
	}{
		{
			name:  "lock ttl not a duration",
			vars:  map[string]string{"ONCEPAY_LOCK_TTL": "abc"},
			lines: [][]string{{`ONCEPAY_LOCK_TTL="abc" is not a duration`}},
		},
		{
			name:  "retention shorter than the redelivery window",
			vars:  map[string]string{"ONCEPAY_DEDUP_RETENTION": "1h"},
			lines: [][]string{{"ONCEPAY_DEDUP_RETENTION=1h0m0s is shorter than ONCEPAY_MAX_REDELIVERY_WINDOW=72h0m0s", "raise the retention"}},
		},
		{
			name: "MySQL with the dev secrets",
			// The channel is named on purpose (embedded), so that only the secrets are wrong.
			vars: map[string]string{"ONCEPAY_MYSQL_DSN": "root:@tcp(127.0.0.1:3306)/x", "ONCEPAY_CHANNEL_URL": "embedded"},
			lines: [][]string{
				{"ONCEPAY_WEBHOOK_KEYS is empty while ONCEPAY_MYSQL_DSN points at a real database"},
				{"ONCEPAY_CHANNEL_SECRET is a dev-* default while ONCEPAY_MYSQL_DSN points at a real database"},
				{"ONCEPAY_ADMIN_KEY is a dev-* default while ONCEPAY_MYSQL_DSN points at a real database"},
			},
		},
		{
			// A real database never gets the channel simulator, which pays any order, by default.
			name: "MySQL without a channel URL",
			vars: map[string]string{"ONCEPAY_MYSQL_DSN": "root:@tcp(127.0.0.1:3306)/x",
				"ONCEPAY_CHANNEL_SECRET": "real-channel-secret", "ONCEPAY_ADMIN_KEY": "real-admin-key",
				"ONCEPAY_WEBHOOK_KEYS": "k:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="},
			lines: [][]string{
				{"ONCEPAY_CHANNEL_URL is empty while ONCEPAY_MYSQL_DSN points at a real database", "ONCEPAY_CHANNEL_URL=embedded"},
			},
		},
		{
			name:  "a real channel without ONCEPAY_CHANNELS",
			vars:  map[string]string{"ONCEPAY_CHANNEL_URL": "https://channel.example.com"},
			lines: [][]string{{"ONCEPAY_CHANNELS is empty while ONCEPAY_CHANNEL_URL names a real channel"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin)
			cmd.Dir = dir
			cmd.Env = cleanEnv(tt.vars)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()

			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("run: %v (want a non-zero exit)\nstderr:\n%s", err, stderr.String())
			}
			if exit.ExitCode() == 0 || exit.ExitCode() == -1 {
				t.Fatalf("exit code %d, want a non-zero exit of its own\nstderr:\n%s", exit.ExitCode(), stderr.String())
			}
			got := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if len(got) == 0 || got[0] != "oncepay: invalid configuration:" {
				t.Errorf("stderr does not start with %q:\n%s", "oncepay: invalid configuration:", stderr.String())
			}
			if problems := got[1:]; len(problems) != len(tt.lines) {
				t.Errorf("stderr has %d problem lines, want %d:\n%s", len(problems), len(tt.lines), stderr.String())
			}
			for _, want := range tt.lines {
				if !anyLineHasAll(got, want) {
					t.Errorf("no stderr line contains %q:\n%s", want, stderr.String())
				}
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout is not empty (the demo banner is printed only once configured):\n%s", stdout.String())
			}
			if _, err := os.Stat(filepath.Join(dir, "data")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the binary created ./data before refusing its configuration (stat: %v)", err)
			}
		})
	}
}

// anyLineHasAll reports whether one of lines contains every one of parts.
func anyLineHasAll(lines, parts []string) bool {
	for _, line := range lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// module is the module path of the binary's packages, as its symbols spell them.
const module = "github.com/oncepay/oncepay"

// TestTheServiceBinaryHasNoLab: bin/oncepay carries none of the training kit. Its linked
// packages include nothing of the training kit (the lab's replicas, the drill, the chaos run), so no
// setting can mount the lab's routes or turn its faults on: they live in the training kit's
// own build, whose settings the service does not read.
func TestTheServiceBinaryHasNoLab(t *testing.T) {
	bin := buildBinary(t)
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	nm, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	if !strings.Contains(string(out), module) {
		t.Fatalf("go version -m does not name the module:\n%s", out)
	}
	for line := range strings.Lines(string(nm)) {
		if strings.Contains(line, module+"/tools/") {
			t.Fatalf("bin/oncepay links the training kit: %s", strings.TrimSpace(line))
		}
	}
	if !strings.Contains(string(nm), module+"/internal/app.") {
		t.Error("go tool nm shows no symbol of internal/app: is it reading the binary?")
	}
}
