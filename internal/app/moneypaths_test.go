package app_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/anomaly"
	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/payment"
	"github.com/oncepay/oncepay/internal/refund"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestFencesOutliveThePurge is I13 on every money path at once. It builds a mixed history
// through the real routes and the real channel simulator — payments, a full and a partial
// refund, cancels (with and without a channel trade), a close, a recharge, a second payment of
// a paid order and of a recharge, a payment of a cancelled order, one trade number reported
// for an order and a recharge, an amount that does not match, refund reports that contradict
// each other — runs every job, then purges every dedup record, empties Redis (replay cache,
// consumer markers, attempt logs) and redelivers every report ever sent, five times over HTTP
// and, for trade reports, five times over Kafka, and runs every job again. With every record
// gone, the claims and the state machine alone must refuse every copy: no new refund (in
// oncepay or at the channel), anomaly, ledger row, payment or state change. It runs on
// SQLite and, when configured, on MySQL, in one run.
func TestFencesOutliveThePurge(t *testing.T) {
	testenv.OnBothDialects(t, func(t *testing.T, db *gorm.DB) {
		s := apptest.StartOn(t, app.Deps{DB: db, Redis: testenv.Redis(t), Kafka: testenv.Kafka(t)}, func(c *config.Config) {
			c.CloseJobInterval, c.ReconcileJobInterval, c.RefundJobInterval, c.PurgeJobInterval = time.Hour, time.Hour, time.Hour, time.Hour
		})
		h := &moneyHistory{t: t, s: s}
		h.build()
		h.runJobs()
		h.waitChannelQuiet()
		h.runJobs()
		before, channelBefore := moneyState(t, s), channelState(s)
		h.checkHistory(before)
		checkBooks(t, s, "before the purge")

		if n := s.PurgeDedup(t, "0s"); n == 0 {
			t.Fatal("the purge removed no dedup record")
		}
		if err := s.Deps.Redis.Client.FlushDB(context.Background()).Err(); err != nil {
			t.Fatalf("empty Redis: %v", err)
		}
		h.redeliver(5)
		h.runJobs()
		h.waitChannelQuiet()
		h.runJobs()

		after, channelAfter := moneyState(t, s), channelState(s)
		for _, k := range slices.Sorted(maps.Keys(after)) {
			if before[k] != after[k] {
				t.Errorf("after the purge and the redeliveries, %s = %q, was %q", k, after[k], before[k])
			}
		}
		for k := range before {
			if _, ok := after[k]; !ok {
				t.Errorf("after the purge and the redeliveries, %s is gone, was %q", k, before[k])
			}
		}
		if channelAfter != channelBefore {
			t.Errorf("at the channel: %s, was %s", channelAfter, channelBefore)
		}
		checkBooks(t, s, "after the purge and the redeliveries")
	})
}

// sent is one report as it was sent the first time, and its first answer.
type sent struct {
	kind   notify.Kind
	body   []byte
	status int
}

// moneyHistory builds the history and remembers every report sent by hand.
type moneyHistory struct {
	t       *testing.T
	s       *apptest.Server
	reports []sent
	orders  map[string]order.View
}

// report posts r by hand, as a channel would, and requires the answer status.
func (h *moneyHistory) report(r notify.Report, status int, code string) {
	h.t.Helper()
	body := r.Body()
	res := h.untilDone(r.Kind, body)
	if res.Status != status || (code != "" && res.Code() != code) {
		h.t.Fatalf("%s report %s: %s; want %d %s", r.Kind, body, res, status, code)
	}
	h.reports = append(h.reports, sent{kind: r.Kind, body: body, status: status})
}

// untilDone posts a report again after every 409 (a copy in flight), as a channel does.
func (h *moneyHistory) untilDone(kind notify.Kind, body []byte) apptest.Response {
	for i := 0; ; i++ {
		r := h.s.SignedPost(notify.Routes[kind], body)
		if r.Status != http.StatusConflict || i == 300 {
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *moneyHistory) order(key, sku string) order.View {
	h.t.Helper()
	o := h.s.CreateOrder(h.t, apptest.AliceKey, key, apptest.Item{SKU: sku, Quantity: 1})
	h.orders[key] = o
	return o
}

// paid opens o's trade at the channel and pays it there; the simulator's own report pays it.
func (h *moneyHistory) paid(o order.View) string {
	h.t.Helper()
	tv := h.openTrade(o)
	if err := h.s.App.Channel.Pay(o.OrderID); err != nil {
		h.t.Fatalf("pay %s at the channel: %v", o.OrderID, err)
	}
	h.waitOrder(o.OrderID, order.Paid)
	return tv.TradeNo
}

func (h *moneyHistory) openTrade(o order.View) payment.TradeView {
	h.t.Helper()
	r := apptest.Must(h.t, h.s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/payments", apptest.AliceKey, nil, apptest.IdemKey("pay-"+o.OrderID)), http.StatusCreated)
	var tv payment.TradeView
	r.Decode(h.t, &tv)
	return tv
}

func (h *moneyHistory) waitOrder(id string, want order.Status) {
	h.t.Helper()
	apptest.Eventually(h.t, 20*time.Second, "order "+id+" "+string(want), func() (bool, string) {
		st := h.s.Order(h.t, id).Status
		return st == want, string(st)
	})
}

func (h *moneyHistory) refund(o order.View, amount *int64) refund.View {
	h.t.Helper()
	body := map[string]any{}
	if amount != nil {
		body["amount"] = *amount
	}
	r := apptest.Must(h.t, h.s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/refunds", apptest.AliceKey, body, apptest.IdemKey("refund-"+o.OrderID)), http.StatusCreated)
	var v refund.View
	r.Decode(h.t, &v)
	apptest.Eventually(h.t, 20*time.Second, "refund "+v.RefundID+" SUCCEEDED", func() (bool, string) {
		var rf refund.Refund
		if err := h.s.DB.Where("id = ?", v.RefundID).Take(&rf).Error; err != nil {
			return false, err.Error()
		}
		return rf.Status == refund.Succeeded, string(rf.Status)
	})
	return v
}

func (h *moneyHistory) cancel(o order.View) {
	h.t.Helper()
	apptest.Must(h.t, h.s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/cancel", apptest.AliceKey, nil, apptest.IdemKey("cancel-"+o.OrderID)), http.StatusOK)
}

func (h *moneyHistory) trade(o order.View, channel, tradeNo string) notify.Report {
	return apptest.Notification(o, channel, tradeNo)
}

// build makes the history, checking each step's own effect as it goes.
func (h *moneyHistory) build() {
	t, s := h.t, h.s
	h.orders = map[string]order.View{}

	// A: paid through the channel, then refunded in full: REFUNDED, its stock back.
	a := h.order("A", "SKU-1002")
	h.paid(a)
	aRefund := h.refund(a, nil)
	h.waitOrder(a.OrderID, order.Refunded)

	// B: paid, then refunded in part: still PAID.
	b := h.order("B", "SKU-1002")
	h.paid(b)
	part := int64(500)
	h.refund(b, &part)

	// C: paid, then paid a second time by another trade of the same channel, and by a trade
	// of another channel: two duplicate_payment anomalies, each refunded once by its trade_no.
	c := h.order("C", "SKU-1002")
	h.paid(c)
	h.report(h.trade(c, "simpay", "DUP-C"), http.StatusOK, "")
	h.report(h.trade(c, "alipay", "ALI-C"), http.StatusOK, "")

	// D: cancelled before any trade, then paid by a trade oncepay never opened:
	// paid_after_close, kept for refund.
	d := h.order("D", "SKU-1002")
	h.cancel(d)
	h.report(h.trade(d, "wechat", "PAC-D"), http.StatusOK, "")

	// E: a trade opened at the channel, then cancelled: the channel's trade is closed first.
	e := h.order("E", "SKU-1002")
	h.openTrade(e)
	h.cancel(e)

	// F: expired unpaid and closed by the close job.
	f := h.order("F", "SKU-1002")
	if err := s.DB.Model(&order.Order{}).Where("id = ?", f.OrderID).Update("expires_at", time.Now().UTC().Add(-time.Minute)).Error; err != nil {
		t.Fatal(err)
	}
	if n := s.RunCloseJob(t); n != 1 {
		t.Fatalf("the close job closed %d orders, want F", n)
	}

	// G: a recharge credited once, then paid a second time by another trade.
	rid := s.CreateRecharge(t, apptest.BobKey, 100_000)
	h.report(apptest.RechargeReport(rid, "wechat", "W-G", 100_000), http.StatusOK, "")
	h.report(apptest.RechargeReport(rid, "wechat", "W-G2", 100_000), http.StatusOK, "")

	// H: one trade number for an order and a recharge, both ways: trade_conflict, never paid.
	j := h.order("J", "SKU-1002")
	h.report(h.trade(j, "wechat", "W-G"), http.StatusUnprocessableEntity, "trade_conflict")
	h.report(apptest.RechargeReport(rid, "simpay", "DUP-C", 100_000), http.StatusUnprocessableEntity, "trade_conflict")

	// I: an amount that does not match, and a status that ends nothing.
	mm := h.trade(j, "alipay", "MM-J")
	mm.Amount++
	h.report(mm, http.StatusBadRequest, "amount_mismatch")
	wait := h.trade(j, "alipay", "WAIT-J")
	wait.Status = "WAIT_BUYER_PAY"
	h.report(wait, http.StatusOK, "")

	// The anomalies' refunds: opened once each, and refused by the channel, which never took
	// those trades (oncepay's channel simulator did not open them).
	h.runJobs()

	// L: refund reports that contradict the refund's end, both ways: A's refund SUCCEEDED,
	// then reported FAILED; D's refund FAILED at the channel's answer, then reported SUCCESS.
	var aRow refund.Refund
	if err := s.DB.Where("id = ?", aRefund.RefundID).Take(&aRow).Error; err != nil || aRow.RefundNo == nil {
		t.Fatalf("A's refund row: %+v, %v", aRow, err)
	}
	h.report(notify.Report{Kind: notify.Refund, Channel: aRow.Channel, Number: *aRow.RefundNo, OutNo: aRow.OutRefundNo, Amount: aRow.Amount, Status: "FAILED"}, http.StatusOK, "")
	var dRow refund.Refund
	if err := s.DB.Where("order_id = ? AND anomaly_id IS NOT NULL", d.OrderID).Take(&dRow).Error; err != nil || dRow.Status != refund.Failed {
		t.Fatalf("D's anomaly refund: %+v, %v; want one, FAILED", dRow, err)
	}
	h.report(notify.Report{Kind: notify.Refund, Channel: dRow.Channel, Number: "RX-D", OutNo: dRow.OutRefundNo, Amount: dRow.Amount, Status: "SUCCESS"}, http.StatusOK, "")
}

// runJobs runs every job once, through the admin routes.
func (h *moneyHistory) runJobs() {
	h.t.Helper()
	for _, job := range []string{"close-expired-orders", "reconcile-payments", "resume-refunds"} {
		apptest.Must(h.t, h.s.Do(http.MethodPost, "/v1/admin/jobs/"+job+"/run", apptest.AdminKey, nil, nil), http.StatusOK)
	}
	day := map[string]string{"date": time.Now().UTC().Format(time.DateOnly)}
	apptest.Must(h.t, h.s.Do(http.MethodPost, "/v1/admin/jobs/reconcile-bills/run", apptest.AdminKey, day, nil), http.StatusOK)
}

// waitChannelQuiet waits until the simulator has nothing left to send: every notification
// delivered or given up, every refund settled.
func (h *moneyHistory) waitChannelQuiet() {
	h.t.Helper()
	apptest.Eventually(h.t, 30*time.Second, "the channel quiet", func() (bool, string) {
		st := h.s.App.Channel.State()
		for _, n := range st.Notifications {
			if n.Status == "pending" {
				return false, "notification " + n.ID + " pending"
			}
		}
		for _, r := range st.Refunds {
			if r.Status == "PROCESSING" {
				return false, "refund " + r.OutRefundNo + " processing"
			}
		}
		return true, ""
	})
}

// checkHistory checks that the history is the one the test means, before anything is purged.
func (h *moneyHistory) checkHistory(st map[string]string) {
	h.t.Helper()
	want := map[string]string{
		"orders." + h.orders["A"].OrderID: "REFUNDED",
		"orders." + h.orders["B"].OrderID: "PAID",
		"orders." + h.orders["C"].OrderID: "PAID",
		"orders." + h.orders["D"].OrderID: "CANCELLED",
		"orders." + h.orders["E"].OrderID: "CANCELLED",
		"orders." + h.orders["F"].OrderID: "CLOSED",
		"orders." + h.orders["J"].OrderID: "PENDING_PAYMENT",
		"count.payments":                  "3",
		"count.account_ledger":            "1",
		// 3 payments, 1 recharge and 4 kept payments captured; 6 refunds (2 asked for, 4 of
		// anomalies) held and ended; the refund voided that the channel then reported
		// carried out, moved out of suspense.
		"count.ledger_transfers": "21",
	}
	for k, v := range want {
		if got, _, _ := strings.Cut(st[k], "|"); got != v {
			h.t.Errorf("history: %s = %q, want %s", k, st[k], v)
		}
	}
	kinds := map[string]int{}
	for k, v := range st {
		if strings.HasPrefix(k, "anomalies.") {
			kind, _, _ := strings.Cut(v, "|")
			kinds[kind]++
		}
	}
	for kind, n := range map[string]int{anomaly.DuplicatePayment: 3, anomaly.PaidAfterClose: 1, anomaly.TradeConflict: 2,
		anomaly.AmountMismatch: 1, anomaly.RefundStatusConflict: 2} {
		if kinds[kind] != n {
			h.t.Errorf("history: %d anomalies %s, want %d (all: %v)", kinds[kind], kind, n, kinds)
		}
	}
	var anomalyRefunds int64
	h.s.DB.Model(&refund.Refund{}).Where("anomaly_id IS NOT NULL").Count(&anomalyRefunds)
	if anomalyRefunds != 4 {
		h.t.Errorf("history: %d refunds of anomalies, want one for each of the 3 duplicate payments and the payment after close", anomalyRefunds)
	}
}

// redeliver sends every report ever sent — by hand and by the simulator — n times over HTTP,
// all at once, and every trade report n times over Kafka; each HTTP copy must get the first
// copy's status again.
func (h *moneyHistory) redeliver(n int) {
	h.t.Helper()
	all := slices.Clone(h.reports)
	for _, note := range h.s.App.Channel.State().Notifications {
		kind := notify.Trade
		if note.Kind == "refund" {
			kind = notify.Refund
		}
		all = append(all, sent{kind: kind, body: note.Body, status: http.StatusOK})
	}
	w := h.s.Writer(h.t)
	var wg sync.WaitGroup
	for _, r := range all {
		for range n {
			wg.Go(func() {
				got := h.untilDone(r.kind, r.body)
				if got.Status != r.status {
					h.t.Errorf("redelivered %s report %s: %s, want %d as the first time", r.kind, r.body, got, r.status)
				}
			})
			if r.kind == notify.Trade {
				if err := apptest.PublishNotification(context.Background(), w, r.body); err != nil {
					h.t.Fatalf("publish: %v", err)
				}
			}
		}
	}
	wg.Wait()
	h.s.WaitConsumed(h.t)
}

// moneyState is every fact a redelivery could change, row by row: each order's status,
// paying trade and last update, each refund's status and what the channel said, each
// recharge, balance and stock figure, each anomaly, and the counts of payments, ledger rows,
// claims and outbox events.
func moneyState(tb testing.TB, s *apptest.Server) map[string]string {
	tb.Helper()
	st := map[string]string{}
	rows := func(table, key, cols string) {
		var out []map[string]any
		if err := s.DB.Table(table).Select(key + " AS k, " + cols).Find(&out).Error; err != nil {
			tb.Fatalf("read %s: %v", table, err)
		}
		names := strings.Split(cols, ", ")
		for _, r := range out {
			vals := make([]string, len(names))
			for i, c := range names {
				vals[i] = fmt.Sprint(deref(r[c]))
			}
			st[table+"."+fmt.Sprint(deref(r["k"]))] = strings.Join(vals, "|")
		}
	}
	rows("orders", "id", "status, channel, trade_no, paid_at, updated_at")
	rows("refunds", "id", "status, channel_status, refund_no, attempts, updated_at")
	rows("recharges", "id", "status, channel, trade_no, updated_at")
	rows("accounts", "user_id", "balance, version")
	rows("inventory", "sku", "available, reserved, sold, version")
	rows("anomalies", "id", "kind, channel, trade_no, amount")
	rows("ledger_transfers", "id", "kind, amount, pending_id, capture_id, created_at")
	rows("ledger_postings", "id", "transfer_id, account, amount, pending")
	for _, table := range []string{"payments", "account_ledger", "ledger_transfers", "ledger_postings", "report_claims", "outbox", "inventory_movements", "refunds", "anomalies"} {
		st["count."+table] = fmt.Sprint(s.Count(tb, table, ""))
	}
	return st
}

// checkBooks fails t with every violation of the books' rules (ledger.Check).
func checkBooks(t *testing.T, s *apptest.Server, when string) {
	t.Helper()
	vs, err := ledger.Check(context.Background(), s.DB)
	if err != nil {
		t.Fatalf("check the books %s: %v", when, err)
	}
	for _, v := range vs {
		t.Errorf("the books %s: %s", when, v)
	}
}

// deref renders a column value: NULL as "NULL", bytes as text.
func deref(v any) any {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		return string(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	}
	return v
}

// channelState is what the channel holds: its trades by status and its refunds, with their sum.
func channelState(s *apptest.Server) string {
	st := s.App.Channel.State()
	byStatus := map[string]int{}
	for _, t := range st.Trades {
		byStatus[t.Status]++
	}
	var sum int64
	for _, r := range st.Refunds {
		sum += r.Amount
	}
	return fmt.Sprintf("trades %v, %d refunds of %d", byStatus, len(st.Refunds), sum)
}
