package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// TestOneDepositOneCredit: on every dialect, a storm of one deposit credits the account once.
func TestOneDepositOneCredit(t *testing.T) {
	for _, dialect := range idemtest.Dialects(t) {
		t.Run(dialect, func(t *testing.T) {
			db := idemtest.DB(t, dialect)
			if err := db.AutoMigrate(&Deposit{}, &Account{}); err != nil {
				t.Fatal(err)
			}
			db.Create(&Account{ID: 42})
			srv := httptest.NewServer(Router(db, idemtest.Redis(t)))
			defer srv.Close()
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					req, _ := http.NewRequest(http.MethodPost, srv.URL+"/accounts/42/deposits", strings.NewReader(`{"amount":500}`))
					req.Header.Set("Idempotency-Key", "dep-1")
					if res, err := http.DefaultClient.Do(req); err == nil {
						res.Body.Close()
					}
				})
			}
			wg.Wait()
			var a Account
			var deposits int64
			db.First(&a, 42)
			db.Model(&Deposit{}).Count(&deposits)
			if a.Balance != 500 || deposits != 1 {
				t.Errorf("balance %d with %d deposits; want 500 and 1", a.Balance, deposits)
			}
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/accounts/x/deposits", strings.NewReader(`{"amount":500}`))
			req.Header.Set("Idempotency-Key", "dep-2")
			if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusBadRequest {
				t.Errorf("a bad account id: %v %v, want 400", res, err)
			}
		})
	}
}
