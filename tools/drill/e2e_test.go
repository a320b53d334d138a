package drill

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/app"
	oncepayconfig "github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
	"github.com/oncepay/oncepay/tools/lab"
)

// TestDrillAgainstTheRealApp is `make drill` as a test: the whole oncepay, with the lab mounted
// and the drill's slow payment path, on the test environment's database, Redis and Kafka (real
// MySQL and Redis in CI), and every scenario of the drill against it. Every oncepay row must
// hold and every lab row must reproduce its incident. It takes about 40 s on SQLite, less on
// MySQL, so -short skips it.
func TestDrillAgainstTheRealApp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every drill against a whole instance (~40 s); skipped with -short")
	}
	quietServerLogs(t)
	cfg, err := oncepayconfig.LoadFrom(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("default configuration: %v", err)
	}
	// The settings of tools/drill.sh, which says why each one is what it is.
	// ONCEPAY_LAB=true and ONCEPAY_CHAOS_PAYMENT_DELAY=7s are the lab's settings (deps below).
	cfg.LockTTL = 5 * time.Second
	cfg.OrderTTL = 3 * time.Second
	cfg.CloseJobInterval = time.Hour
	cfg.ChannelTimeout, cfg.ChannelRetries = time.Second, 1
	cfg.ReconcileJobInterval, cfg.RefundJobInterval = time.Hour, time.Hour
	cfg.WebhookSchedule, cfg.WebhookInterval = []time.Duration{time.Second, 2 * time.Second}, 100*time.Millisecond
	cfg.ChannelSecret, cfg.AdminKey = "dev-channel-secret", "dev-admin-key"
	// The drill's own notifications name a channel of their own (drillChannel), which oncepay
	// must be configured with like any other: ONCEPAY_CHANNELS in tools/drill.sh.
	cfg.Channels = append(cfg.Channels, oncepayconfig.Channel{Name: drillChannel, Secret: cfg.ChannelSecret})
	cfg.SeedDemo = true
	cfg.DataDir = t.TempDir()
	cfg.EmbeddedChannelAddr = "127.0.0.1:0" // a simulator of its own, on a free port

	rdb := testenv.Redis(t)
	if rdb.Embedded != nil {
		// miniredis counts TTLs down only when told to; let them run like a real Redis's, so
		// that oncepay's 5 s lock lease must really be renewed while a payment works.
		rdb.Embedded.ClockTTL(true)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The channel simulator's notifications (I8, I9) come back to this instance.
	cfg.PublicURL = "http://" + ln.Addr().String()
	deps := lab.Settings{Lab: true, PaymentDelay: 7 * time.Second}.Deps()
	deps.DB, deps.Redis, deps.Kafka = testenv.DB(t), rdb, testenv.Kafka(t)
	a, err := app.New(t.Context(), cfg, deps)
	if err != nil {
		_ = ln.Close()
		t.Fatalf("app.New: %v", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- a.Run(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("app.Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("the instance did not stop within 30s")
		}
		a.Close()
	})

	args := []string{"--url", "http://" + ln.Addr().String(), "--kafka", strings.Join(a.Kafka.Brokers, ","),
		"--lab", "on", "--json", "--wait", "30s"}
	drillCtx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var out, progress bytes.Buffer
	start := time.Now()
	code := run(drillCtx, args, &out, &progress)
	t.Logf("the drill took %s (%s)", time.Since(start).Round(100*time.Millisecond), testenv.Describe())

	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("exit %d and no JSON report: %v\nstdout:\n%s\nstderr:\n%s", code, err, out.String(), progress.String())
	}
	var table strings.Builder
	_ = writeTable(&table, rep)
	failed := false
	if code != exitOK {
		t.Errorf("exit status %d, want %d", code, exitOK)
		failed = true
	}
	oncepay, lab := 0, 0
	for _, r := range rep.Results {
		want := verdictHeld
		if r.Target == labRoutes.target {
			want, lab = verdictReproduced, lab+1
		} else {
			oncepay++
		}
		if r.ID == "I14" && r.Verdict == verdictSkipped {
			// I14 starts instances of bin/oncepay on a private primary and replica; beside
			// the test binary there is none, and the row says so (make drill runs it).
			continue
		}
		if r.Verdict != want {
			t.Errorf("%s %s against %s: %s, want %s: %s", r.ID, r.Name, r.Target, r.Verdict, want, r.Summary)
			failed = true
		}
	}
	if want := labScenarios(); oncepay != len(catalog) || lab != want {
		t.Errorf("%d oncepay and %d lab rows, want %d and %d", oncepay, lab, len(catalog), want)
		failed = true
	}
	if failed {
		t.Logf("the drill's report:\n%s\nprogress:\n%s", table.String(), progress.String())
	}
}

// labScenarios counts the scenarios of the catalog that have a lab replica.
func labScenarios() int {
	n := 0
	for _, s := range catalog {
		if s.lab {
			n++
		}
	}
	return n
}

// quietServerLogs keeps the instance's logs out of the test output, unless ONCEPAY_TEST_LOG
// is set; errors still show. The drill provokes warnings on purpose (a consumer retrying a
// copy that is in progress, a purge with older_than=0s), and its report is the evidence.
func quietServerLogs(t *testing.T) {
	level := slog.LevelError
	if os.Getenv("ONCEPAY_TEST_LOG") != "" {
		level = slog.LevelInfo
	}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	t.Cleanup(func() { slog.SetDefault(prev) })
}
