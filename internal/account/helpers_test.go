package account_test

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/account"
	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/config"
)

// accountConfig is the account tests' configuration: no demo data, so that the accounts, the
// ledger and the recharges hold only what a test made, and a channel secret and admin key
// that are not the dev defaults, as the binary demands them on MySQL. Every configured
// channel (ONCEPAY_CHANNELS, default simpay,alipay,wechat) signs with that secret, as
// ONCEPAY_CHANNEL_SECRET makes them in the binary: the channels were read from the empty
// environment before this option ran, with the dev secret.
func accountConfig(cfg *config.Config) {
	cfg.SeedDemo = false
	cfg.ChannelSecret = "test-channel-secret"
	cfg.AdminKey = "test-admin-key"
	for i := range cfg.Channels {
		cfg.Channels[i].Secret = cfg.ChannelSecret
	}
}

// tally counts strings, for logging which layer answered.
type tally struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *tally) add(keys ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	for _, k := range keys {
		c.m[k]++
	}
}

func (c *tally) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *tally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, c.m[k])
	}
	return strings.Join(parts, " ")
}

// snapshot is the business state the bad-input tests compare before and after.
type snapshot struct {
	Balances   map[int64]int64
	Statuses   map[int64]string
	LedgerRows int64
	Recharges  int64
	Anomalies  map[string]int64
}

func takeSnapshot(t testing.TB, db *gorm.DB) snapshot {
	t.Helper()
	s := snapshot{Balances: map[int64]int64{}, Statuses: map[int64]string{}, Anomalies: map[string]int64{}}
	var accts []account.Account
	must(t, db.Find(&accts).Error)
	for _, a := range accts {
		s.Balances[a.UserID] = a.Balance
	}
	var rcs []account.Recharge
	must(t, db.Find(&rcs).Error)
	for _, rc := range rcs {
		s.Statuses[rc.ID] = string(rc.Status)
	}
	s.Recharges = int64(len(rcs))
	must(t, db.Model(&account.Entry{}).Count(&s.LedgerRows).Error)
	var an []anomaly.Anomaly
	must(t, db.Find(&an).Error)
	for _, a := range an {
		s.Anomalies[a.Kind]++
	}
	return s
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// invariant checks balance == sum(ledger amounts) for every account, and returns the balances.
func invariant(t testing.TB, db *gorm.DB) map[int64]int64 {
	t.Helper()
	var rows []struct {
		UserID  int64
		Balance int64
		Ledger  int64
	}
	must(t, db.Raw(`SELECT a.user_id, a.balance, COALESCE(SUM(l.amount), 0) AS ledger
		FROM accounts a LEFT JOIN account_ledger l ON l.user_id = a.user_id
		GROUP BY a.user_id, a.balance`).Scan(&rows).Error)
	out := map[int64]int64{}
	for _, r := range rows {
		if r.Balance != r.Ledger {
			t.Errorf("user %d: balance %d != sum(ledger) %d", r.UserID, r.Balance, r.Ledger)
		}
		out[r.UserID] = r.Balance
	}
	return out
}

// creditedOnce checks that the recharge is SUCCEEDED by tradeNo with exactly one ledger row.
func creditedOnce(t testing.TB, db *gorm.DB, rechargeID, tradeNo string) {
	t.Helper()
	var rc account.Recharge
	must(t, db.Where("id = ?", rechargeID).Take(&rc).Error)
	if rc.Status != account.RechargeSucceeded || rc.TradeNo == nil || *rc.TradeNo != tradeNo {
		t.Errorf("recharge %s: status %s trade_no %v, want SUCCEEDED by %s", rechargeID, rc.Status, rc.TradeNo, tradeNo)
	}
	var rows int64
	must(t, db.Model(&account.Entry{}).Where("biz_type = ? AND biz_id = ?", account.BizTypeRecharge, rechargeID).Count(&rows).Error)
	if rows != 1 {
		t.Errorf("recharge %s: %d ledger rows, want 1", rechargeID, rows)
	}
}
