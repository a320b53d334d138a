package app_test

import (
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/internal/app"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/order"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestLedgerAPI follows one payment and its refund through the admin API's read side of the
// books: the order's view names its transfer, the transfer shows its two postings, the
// balances and the postings' pages add up, the check finds nothing, and bad input is 400.
func TestLedgerAPI(t *testing.T) {
	s := apptest.Start(t)
	item := apptest.Item{SKU: "LEDGER-" + apptest.RandHex(3), Quantity: 1}
	s.PutInventory(t, item.SKU, 2500, 10)
	o := s.CreateOrder(t, apptest.AliceKey, "ledger-"+apptest.RandHex(4), item)
	tradeNo := "T-LEDGER-" + apptest.RandHex(4)
	apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(o, "alipay", tradeNo))), http.StatusOK)

	var paid order.View
	apptest.Must(t, s.GetOrder(apptest.AliceKey, o.OrderID), http.StatusOK).Decode(t, &paid)
	if want := ledger.TradeID("alipay", tradeNo); paid.Transfer == nil || *paid.Transfer != want {
		t.Fatalf("the paid order's transfer: %v, want %s", paid.Transfer, want)
	}
	admin := func(path string) apptest.Response {
		return s.Do(http.MethodGet, "/v1/admin/ledger"+path, apptest.AdminKey, nil, nil)
	}

	var capture ledger.TransferView
	apptest.Must(t, admin("/transfers/"+url.PathEscape(*paid.Transfer)), http.StatusOK).Decode(t, &capture)
	if capture.Kind != ledger.Capture || capture.Amount != 2500 || len(capture.Postings) != 2 ||
		capture.Postings[0].Account != "channel:alipay" || capture.Postings[0].Amount != -2500 ||
		capture.Postings[1].Account != ledger.Revenue || capture.Postings[1].Amount != 2500 {
		t.Fatalf("the capture: %+v", capture)
	}

	// A refund of 1000: alipay has no API here, so the channel never takes it and its
	// pending transfer is voided.
	apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/refunds", apptest.AliceKey, map[string]any{"amount": 1000},
		apptest.IdemKey("ledger-refund-"+apptest.RandHex(4))), http.StatusCreated)
	apptest.Eventually(t, 10*time.Second, "the refund voided", func() (bool, string) {
		return s.Count(t, "ledger_transfers", "kind = ?", ledger.Void) == 1, "no void yet"
	})
	var revenue ledger.Balance
	apptest.Must(t, admin("/accounts/merchant:revenue"), http.StatusOK).Decode(t, &revenue)
	if revenue != (ledger.Balance{Account: ledger.Revenue, Posted: 2500}) {
		t.Errorf("revenue: %+v, want 2500 posted and nothing pending", revenue)
	}

	// The channel's postings, one per page.
	var seen []ledger.PostingView
	next := ""
	for range 5 {
		path := "/accounts/channel:alipay/postings?limit=1"
		if next != "" {
			path += "&cursor=" + next
		}
		var page struct {
			Postings   []ledger.PostingView `json:"postings"`
			NextCursor *string              `json:"next_cursor"`
		}
		apptest.Must(t, admin(path), http.StatusOK).Decode(t, &page)
		seen = append(seen, page.Postings...)
		if page.NextCursor == nil {
			break
		}
		next = *page.NextCursor
	}
	var sum int64
	for _, p := range seen {
		sum += p.Amount
	}
	// The capture's −2500 and the voided refund's pending +1000.
	if len(seen) != 2 || sum != -1500 {
		t.Errorf("the channel's postings: %+v, want the capture's and the refund's", seen)
	}

	var check struct{ Violations []ledger.Violation }
	apptest.Must(t, admin("/check"), http.StatusOK).Decode(t, &check)
	if len(check.Violations) != 0 {
		t.Errorf("the books: %v", check.Violations)
	}

	for path, want := range map[string]int{
		"/accounts/bogus":                           http.StatusBadRequest,
		"/accounts/customer:abc":                    http.StatusBadRequest,
		"/accounts/merchant:revenue?x=1":            http.StatusBadRequest,
		"/accounts/suspense/postings?limit=0":       http.StatusBadRequest,
		"/accounts/suspense/postings?cursor=nope":   http.StatusBadRequest,
		"/transfers/" + url.PathEscape("trade:x:y"): http.StatusNotFound,
		"/check?verbose=1":                          http.StatusBadRequest,
	} {
		if r := admin(path); r.Status != want {
			t.Errorf("GET /v1/admin/ledger%s: %s, want %d", path, r, want)
		}
	}
	if r := s.Do(http.MethodGet, "/v1/admin/ledger/check", apptest.AliceKey, nil, nil); r.Status != http.StatusForbidden && r.Status != http.StatusUnauthorized {
		t.Errorf("a user's key on the books: %s, want 401 or 403", r)
	}
}

// TestBackfillPostsTheMoneyOfBefore stands for a database migrated from before the books: a
// history (a paid order, its refund voided, a recharge, a payment kept for refund) whose
// transfers are then deleted. The check names what is missing; the backfill job posts exactly
// the transfers the writes had posted — same ids, kinds, amounts and postings — and a second
// run posts nothing. On SQLite and on MariaDB.
func TestBackfillPostsTheMoneyOfBefore(t *testing.T) {
	testenv.OnBothDialects(t, func(t *testing.T, db *gorm.DB) {
		s := apptest.StartOn(t, app.Deps{DB: db, Redis: testenv.Redis(t), Kafka: testenv.Kafka(t)})
		item := apptest.Item{SKU: "BACKFILL-" + apptest.RandHex(3), Quantity: 1}
		s.PutInventory(t, item.SKU, 3000, 10)
		o := s.CreateOrder(t, apptest.AliceKey, "backfill-"+apptest.RandHex(4), item)
		apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(o, "alipay", "T-BF-"+apptest.RandHex(4)))), http.StatusOK)
		apptest.Must(t, s.SignedNotify(apptest.JSON(apptest.Notification(o, "alipay", "T-BF-DUP-"+apptest.RandHex(4)))), http.StatusOK)
		apptest.Must(t, s.Do(http.MethodPost, "/v1/orders/"+o.OrderID+"/refunds", apptest.AliceKey, map[string]any{"amount": 1000},
			apptest.IdemKey("backfill-refund-"+apptest.RandHex(4))), http.StatusCreated)
		rid := s.CreateRecharge(t, apptest.AliceKey, 700)
		apptest.Must(t, s.NotifyRecharge(apptest.RechargeReport(rid, "alipay", "T-BF-RC-"+apptest.RandHex(4), 700)), http.StatusOK)
		apptest.Eventually(t, 10*time.Second, "the refund voided", func() (bool, string) {
			return s.Count(t, "ledger_transfers", "kind = ?", ledger.Void) == 1, "no void yet"
		})

		books := func() map[string]string {
			st := map[string]string{}
			var ts []ledger.Transfer
			var ps []ledger.Posting
			if err := s.DB.Find(&ts).Error; err != nil {
				t.Fatal(err)
			}
			if err := s.DB.Find(&ps).Error; err != nil {
				t.Fatal(err)
			}
			for _, tr := range ts {
				st[tr.ID] = fmt.Sprintf("%s %d %s %s", tr.Kind, tr.Amount, orNull(tr.PendingID), orNull(tr.CaptureID))
			}
			for _, p := range ps {
				st[p.TransferID+" "+p.Account] = fmt.Sprintf("%d %v", p.Amount, p.Pending)
			}
			return st
		}
		before := books()
		// capture, kept capture, recharge capture, the refund's hold and its void.
		if n := s.Count(t, "ledger_transfers", ""); n != 5 {
			t.Fatalf("the history posted %d transfers, want 5: %v", n, before)
		}
		for _, table := range []string{"ledger_postings", "ledger_transfers"} {
			if err := s.DB.Exec("DELETE FROM " + table).Error; err != nil {
				t.Fatal(err)
			}
		}
		if vs, err := ledger.Check(t.Context(), s.DB); err != nil || len(vs) == 0 {
			t.Fatalf("the check of books without their transfers: %v %v, want violations", vs, err)
		}

		var run struct{ Posted int64 }
		adminRun(t, s, "backfill-ledger", nil, &run)
		if run.Posted != 5 {
			t.Errorf("the backfill posted %d transfers, want 5", run.Posted)
		}
		after := books()
		if !maps.Equal(before, after) {
			t.Errorf("the backfilled books differ from the written ones:\nwritten    %v\nbackfilled %v", before, after)
		}
		checkBooks(t, s, "after the backfill")
		adminRun(t, s, "backfill-ledger", nil, &run)
		if run.Posted != 0 {
			t.Errorf("a second backfill posted %d transfers, want 0", run.Posted)
		}
	})
}

// orNull is *s, or NULL.
func orNull(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}
