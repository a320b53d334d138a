package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// Configured secrets for these tests. Each starts with four characters found nowhere else in
// oncepay's output, so that a printed prefix is caught as surely as the whole secret.
const (
	testAdminKey      = "Adm9-real-admin-key-7f3c"
	testChannelSecret = "Chn4-real-channel-secret-91ab"
	testDSNPassword   = "Pwd8-real-password-55"
	testWebhookKeys   = "k1:cmVhbC13ZWJob29rLWtleS0zMi1ieXRlcy1sb25nISE="
)

// assertNoSecret fails the test if out contains one of secrets or its first four characters.
func assertNoSecret(t *testing.T, what, out string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("%s reveals the secret %q:\n%s", what, s, out)
		} else if strings.Contains(out, s[:4]) {
			t.Errorf("%s reveals the prefix %q of the secret %q:\n%s", what, s[:4], s, out)
		}
	}
}

// TestBanner checks the start-up banner: the demo keys are shown only while both secrets are
// the dev-* defaults, and a configured secret never appears, not even its first characters.
func TestBanner(t *testing.T) {
	tests := []struct {
		name          string
		admin, secret string
		showsKeys     bool
		// addr and base are where the server listens by default and the banner's URL: loopback
		// while either secret is its public dev-* default, every interface once both are real.
		addr, base string
	}{
		{name: "dev defaults", admin: config.DevAdminKey, secret: config.DevChannelSecret, showsKeys: true,
			addr: "127.0.0.1:8080", base: "http://127.0.0.1:8080"},
		{name: "admin key configured", admin: testAdminKey, secret: config.DevChannelSecret, addr: "127.0.0.1:8080", base: "http://127.0.0.1:8080"},
		{name: "channel secret configured", admin: config.DevAdminKey, secret: testChannelSecret, addr: "127.0.0.1:8080", base: "http://127.0.0.1:8080"},
		{name: "both configured", admin: testAdminKey, secret: testChannelSecret, addr: ":8080", base: "http://localhost:8080"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.LoadFrom(func(name string) (string, bool) {
				switch name {
				case "ONCEPAY_ADMIN_KEY":
					return tt.admin, true
				case "ONCEPAY_CHANNEL_SECRET":
					return tt.secret, true
				}
				return "", false
			})
			if err != nil {
				t.Fatalf("LoadFrom: %v", err)
			}
			var out bytes.Buffer
			printBanner(&out, cfg, nil)
			banner := out.String()
			assertNoSecret(t, "the banner", banner, testAdminKey, testChannelSecret)
			for _, demo := range []string{"demo-alice-key", "demo-bob-key", config.DevAdminKey, config.DevChannelSecret} {
				if got := strings.Contains(banner, demo); got != tt.showsKeys {
					t.Errorf("the banner shows %q: %v, want %v:\n%s", demo, got, tt.showsKeys, banner)
				}
			}
			if !strings.Contains(banner, "curl -s "+tt.base+"/healthz") {
				t.Errorf("the banner lacks the curl example on %s:\n%s", tt.base, banner)
			}
			if cfg.HTTPAddr != tt.addr || cfg.PublicURL != tt.base {
				t.Errorf("listen address %q, public URL %q; want %q and %s", cfg.HTTPAddr, cfg.PublicURL, tt.addr, tt.base)
			}
		})
	}
}

// TestStartupOutputHidesSecrets runs the real binary with configured secrets and checks that
// nothing it prints — the banner on stdout, the JSON logs (configuration included) on stderr,
// an error on the way out — reveals a secret or its prefix: once for a start that succeeds
// (everything embedded) and once for one that fails on a MySQL DSN with a password.
func TestStartupOutputHidesSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	secrets := []string{testAdminKey, testChannelSecret, testDSNPassword, testWebhookKeys}

	t.Run("embedded start", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin)
		cmd.Dir = dir
		cmd.Env = cleanEnv(map[string]string{
			"ONCEPAY_ADMIN_KEY":             testAdminKey,
			"ONCEPAY_CHANNEL_SECRET":        testChannelSecret,
			"ONCEPAY_SEED_DEMO":             "true",
			"ONCEPAY_DATA_DIR":              dir,
			"ONCEPAY_HTTP_ADDR":             "127.0.0.1:0",
			"ONCEPAY_EMBEDDED_REDIS_ADDR":   "127.0.0.1:0",
			"ONCEPAY_EMBEDDED_KAFKA_ADDR":   "127.0.0.1:0",
			"ONCEPAY_EMBEDDED_CHANNEL_ADDR": "127.0.0.1:0",
		})
		var stderr testenv.SyncBuffer
		cmd.Stderr = &stderr
		stdoutPipe, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start: %v", err)
		}
		var stdout strings.Builder
		listening := make(chan struct{})
		copied := make(chan struct{})
		go func() {
			defer close(copied)
			sc := bufio.NewScanner(stdoutPipe)
			seen := false
			for sc.Scan() {
				stdout.WriteString(sc.Text() + "\n")
				if !seen && strings.Contains(sc.Text(), "/healthz") {
					seen = true
					close(listening)
				}
			}
		}()
		select {
		case <-listening:
		case <-copied:
			_ = cmd.Wait()
			t.Fatalf("the binary ended before printing its banner\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		case <-ctx.Done():
			t.Fatalf("no banner within 90s\nstderr:\n%s", stderr.String())
		}
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatalf("interrupt: %v", err)
		}
		<-copied
		if err := cmd.Wait(); err != nil {
			t.Errorf("the binary did not stop cleanly on SIGINT: %v\nstderr:\n%s", err, stderr.String())
		}
		if !strings.Contains(stderr.String(), "starting oncepay") || !strings.Contains(stderr.String(), `"admin_key"`) {
			t.Fatalf("stderr lacks the logged configuration, so the check would prove nothing:\n%s", stderr.String())
		}
		assertNoSecret(t, "stdout", stdout.String(), secrets...)
		assertNoSecret(t, "stderr", stderr.String(), secrets...)
	})

	t.Run("MySQL DSN with a password", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin)
		cmd.Dir = dir
		cmd.Env = cleanEnv(map[string]string{
			"ONCEPAY_ADMIN_KEY":      testAdminKey,
			"ONCEPAY_CHANNEL_SECRET": testChannelSecret,
			// Nothing listens on port 1: the start fails after the configuration is logged.
			"ONCEPAY_MYSQL_DSN": "oncepay:" + testDSNPassword + "@tcp(127.0.0.1:1)/oncepay?timeout=2s",
			// A real database needs a key ring for the webhook secrets (it is a secret too).
			"ONCEPAY_WEBHOOK_KEYS": testWebhookKeys,
			"ONCEPAY_DATA_DIR":     dir,
			// A real database needs the channel named; the simulator, on purpose, will do.
			"ONCEPAY_CHANNEL_URL": "embedded",
		})
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("run: %v, want a failed start (nothing listens on 127.0.0.1:1)\nstderr:\n%s", err, stderr.String())
		}
		if !strings.Contains(stderr.String(), `"mysql_dsn":"oncepay:****@tcp(127.0.0.1:1)/oncepay?timeout=2s"`) {
			t.Errorf("stderr lacks the masked DSN in the logged configuration:\n%s", stderr.String())
		}
		assertNoSecret(t, "stdout", stdout.String(), secrets...)
		assertNoSecret(t, "stderr", stderr.String(), secrets...)
	})
}
