package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/client"
	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// orderRow is the stand-in shop's order.
type orderRow struct {
	ID    int64 `gorm:"primaryKey"`
	User  string
	Items string
}

// shop stands in for oncepay's POST /v1/orders, built on the idempotency kit as
// examples/nethttp is: one order per user and Idempotency-Key, later copies replayed.
func shop(db *gorm.DB, rdb redis.UniversalClient) http.Handler {
	h := httpkey.Handler{Guard: idempotent.New(db, rdb, idempotent.Config{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/orders", func(w http.ResponseWriter, r *http.Request) {
		user := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		key, err := httpkey.Key(r, "user:"+user)
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		if err != nil {
			httpkey.DefaultProblem(w, r, http.StatusBadRequest, err)
			return
		}
		_, _ = h.Do(w, r, key, body, idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
			row := orderRow{User: user, Items: string(body)}
			if err := tx.Create(&row).Error; err != nil {
				return idempotent.Response{}, err
			}
			out, _ := json.Marshal(map[string]string{"order_id": strconv.FormatInt(row.ID, 10), "status": "PENDING_PAYMENT"})
			return idempotent.Response{Status: http.StatusCreated, Header: map[string]string{"Content-Type": "application/json"}, Body: out}, nil
		}))
	})
	return mux
}

// lostAnswers delivers every request and loses every answer: the program's network dies
// after the shop made the order, and the program is killed before any answer arrives.
type lostAnswers struct{}

func (lostAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return nil, context.DeadlineExceeded
}

// TestCrashAfterSendOrdersOnce: the program sends an order, never hears back and dies; the
// journal kept its key. After the restart, Resume sends it again under that key and gets the
// order the shop made the first time: one order in the shop's database, nothing left pending.
func TestCrashAfterSendOrdersOnce(t *testing.T) {
	for _, dialect := range idemtest.Dialects(t) {
		t.Run(dialect, func(t *testing.T) {
			db := idemtest.DB(t, dialect)
			if err := errors.Join(db.AutoMigrate(&orderRow{}), idempotent.CreateSchema(db)); err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(shop(db, idemtest.Redis(t)))
			defer srv.Close()
			j := &Journal{Path: filepath.Join(t.TempDir(), "orders.journal")}
			items := []client.Item{{SKU: "SKU-1002", Quantity: 1}}

			// The first run: the answers are lost, and the program is killed after 300 ms.
			before, err := New(srv.URL, "merchant-1", j, lostAnswers{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, kill := context.WithTimeout(context.Background(), 300*time.Millisecond)
			_, err = Place(ctx, before, j, items)
			kill()
			var ie *client.IndefiniteError
			if !errors.As(err, &ie) {
				t.Fatalf("the first run ended with %v, want no final answer", err)
			}
			pending, err := j.Pending()
			if err != nil || len(pending) != 1 || pending[0].Key != ie.Key {
				t.Fatalf("journal %+v (%v), want the one order under key %s", pending, err, ie.Key)
			}

			// The restart: the journal's order is resumed under its own key.
			after, err := New(srv.URL, "merchant-1", j, nil)
			if err != nil {
				t.Fatal(err)
			}
			resumed, err := Resume(context.Background(), after, j)
			if err != nil || len(resumed) != 1 || !resumed[0].Replayed || resumed[0].Value.OrderID == "" {
				t.Fatalf("resumed %+v, %v: want the first order, replayed", resumed, err)
			}
			var orders int64
			db.Model(&orderRow{}).Count(&orders)
			if orders != 1 {
				t.Errorf("%d orders in the shop, want 1", orders)
			}
			if pending, err := j.Pending(); err != nil || len(pending) != 0 {
				t.Errorf("journal still holds %+v (%v)", pending, err)
			}

			// A new order is a new key: a second row.
			if _, err := Place(context.Background(), after, j, items); err != nil {
				t.Fatal(err)
			}
			db.Model(&orderRow{}).Count(&orders)
			if orders != 2 {
				t.Errorf("%d orders after a second one, want 2", orders)
			}
		})
	}
}
