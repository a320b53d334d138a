package account_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/platform/redisx"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestThreeProcessesCreditOnce is TestThreeInstancesCreditOnce with nothing shared but
// MariaDB and Redis: the real binary, built once, started three times on free ports with
// distinct node ids and data directories. The same notification is sent to all three at
// once, round after round; every recharge is credited once.
//
// The processes use Redis database 0 (the binary has no setting for another); the keys they
// leave there (replay cache entries) are deleted at the end.
func TestThreeProcessesCreditOnce(t *testing.T) {
	testenv.RequireMySQL(t)
	redisAddr := os.Getenv(testenv.EnvRedisAddr)
	if redisAddr == "" || testing.Short() {
		t.Skip("needs a real Redis (ONCEPAY_TEST_REDIS_ADDR) and builds the binary; skipped with -short")
	}
	db, dsn := testenv.DBWithDSN(t)
	channel := "proc_" + apptest.RandHex(4)
	cfg := apptest.Config(t, accountConfig, func(c *config.Config) {
		// The processes accept reports from this test's own channel (ONCEPAY_CHANNELS).
		c.Channels = append(c.Channels, config.Channel{Name: channel, Secret: c.ChannelSecret})
	})
	bin := buildOncepay(t)
	userID, key := apptest.NewUser(t, db, "procs")
	t.Cleanup(func() { dropRedisKeys(redisAddr, channel, userID) })

	var wg sync.WaitGroup
	urls := make([]string, 3)
	for i := range urls {
		wg.Go(func() { urls[i] = startProcess(t, bin, i+1, dsn, redisAddr, cfg) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	servers := make([]*apptest.Server, len(urls))
	for i, url := range urls {
		servers[i] = apptest.At(t, url, cfg, db)
	}

	creditRounds(t, userID, key, creditPlan{servers: servers, channel: channel, tradePrefix: "P", rounds: 20, copies: 2, base: 3000})
}

// buildOncepay compiles cmd/oncepay into a temporary directory.
func buildOncepay(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "oncepay")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/oncepay/oncepay/cmd/oncepay").CombinedOutput()
	if err != nil {
		t.Fatalf("go build ./cmd/oncepay: %v\n%s", err, out)
	}
	return bin
}

// startProcess starts the binary as instance node on a free port, with the channel secret,
// admin key, configured channels and demo setting of cfg and the embedded channel simulator,
// waits for /healthz and stops it when the test ends (testenv.StartProcess). It returns the
// base URL, or "" with the test failed.
func startProcess(t *testing.T, bin string, node int, dsn, redisAddr string, cfg config.Config) string {
	t.Helper()
	addr := testenv.FreeAddr(t)
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"ONCEPAY_HTTP_ADDR=" + addr,
		"ONCEPAY_MYSQL_DSN=" + dsn,
		"ONCEPAY_REDIS_ADDR=" + redisAddr,
		"ONCEPAY_EMBEDDED_KAFKA_ADDR=127.0.0.1:0",
		"ONCEPAY_EMBEDDED_CHANNEL_ADDR=127.0.0.1:0",
		"ONCEPAY_DATA_DIR=" + t.TempDir(),
		"ONCEPAY_NODE_ID=" + fmt.Sprint(node),
		"ONCEPAY_CHANNEL_SECRET=" + cfg.ChannelSecret,
		// A real database needs the channel named on purpose: the embedded simulator. Every
		// configured channel signs with ONCEPAY_CHANNEL_SECRET.
		"ONCEPAY_CHANNEL_URL=" + config.EmbeddedChannelURL,
		"ONCEPAY_CHANNELS=" + channelList(cfg),
		"ONCEPAY_ADMIN_KEY=" + cfg.AdminKey,
		"ONCEPAY_WEBHOOK_KEYS=proc:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
		"ONCEPAY_SEED_DEMO=" + strconv.FormatBool(cfg.SeedDemo),
	}
	return testenv.StartProcess(t, fmt.Sprintf("instance %d", node), bin, addr, env)
}

// channelList is cfg's channels as ONCEPAY_CHANNELS lists them.
func channelList(cfg config.Config) string {
	names := make([]string, len(cfg.Channels))
	for i, ch := range cfg.Channels {
		names[i] = ch.Name
	}
	return strings.Join(names, ",")
}

// dropRedisKeys deletes the idempotency keys the processes left in Redis database 0.
func dropRedisKeys(addr, channel string, userID int64) {
	ctx := context.Background()
	rdb := redisx.NewClient(addr, 0)
	defer rdb.Close()
	for _, pattern := range []string{"oncepay:idem:*channel:" + channel + ":*", fmt.Sprintf("oncepay:idem:*user:%d:*", userID)} {
		iter := rdb.Scan(ctx, 0, pattern, 500).Iterator()
		for iter.Next(ctx) {
			_ = rdb.Del(ctx, iter.Val()).Err()
		}
	}
}
