package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
)

// The benchmark transaction sells one unit of benchSKU, whose stock starts at initialStock:
// enough that no run sells out.
const (
	benchSKU     = "SKU-1"
	initialStock = 1_000_000_000
)

// orderBody is the request body every client sends. The handlers read it, and the guard
// fingerprints it; the transaction itself is fixed.
var orderBody = []byte(`{"sku":"SKU-1","qty":1}`)

// errOutOfStock is the business refusal of the transaction: the stock UPDATE matched no row.
var errOutOfStock = errors.New("out of stock")

// orders runs the benchmark transaction, the same in every variant.
type orders struct {
	db *gorm.DB
	// seq numbers the orders: the bench database is new in every process.
	seq atomic.Int64
}

// place runs the transaction's statements on tx: it inserts one order, then takes one unit
// from the hot stock row, last so that its row lock is held as briefly as possible. It
// returns the response body, {"order_id":"..."}.
func (o *orders) place(tx *gorm.DB) ([]byte, error) {
	id := o.seq.Add(1)
	err := tx.Exec("INSERT INTO orders (id, sku, qty, created_at) VALUES (?, ?, ?, ?)",
		id, benchSKU, 1, time.Now().UTC()).Error
	if err != nil {
		return nil, err
	}
	res := tx.Exec("UPDATE stock SET available = available - 1 WHERE sku = ? AND available >= 1", benchSKU)
	if res.Error != nil {
		return nil, res.Error
	}
	if res.RowsAffected != 1 {
		return nil, errOutOfStock
	}
	return orderJSON(id), nil
}

// open is the cold half of place: the order row only. take is its hot half.
func (o *orders) open(tx *gorm.DB) ([]byte, error) {
	id := o.seq.Add(1)
	err := tx.Exec("INSERT INTO orders (id, sku, qty, created_at) VALUES (?, ?, ?, ?)",
		id, benchSKU, 1, time.Now().UTC()).Error
	return orderJSON(id), err
}

// take takes one unit from the hot stock row.
func (o *orders) take(tx *gorm.DB) error {
	res := tx.Exec("UPDATE stock SET available = available - 1 WHERE sku = ? AND available >= 1", benchSKU)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != 1 {
		return errOutOfStock
	}
	return nil
}

// placeInTx runs place in a transaction of its own: BEGIN, the statements, COMMIT.
func (o *orders) placeInTx(ctx context.Context) ([]byte, error) {
	var body []byte
	err := o.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		body, err = o.place(tx)
		return err
	})
	return body, err
}

// orderJSON is the body of a created order.
func orderJSON(id int64) []byte {
	b := append([]byte(`{"order_id":"`), strconv.FormatInt(id, 10)...)
	return append(b, `"}`...)
}

// errorJSON is the body of a refusal.
func errorJSON(code string) []byte { return []byte(`{"error":"` + code + `"}`) }

// bareHandler is the baseline: POST /orders runs the transaction with no idempotency at all.
func bareHandler(o *orders) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			writeJSON(w, http.StatusBadRequest, errorJSON("unreadable_body"))
			return
		}
		body, err := o.placeInTx(r.Context())
		switch {
		case errors.Is(err, errOutOfStock):
			writeJSON(w, http.StatusConflict, errorJSON("out_of_stock"))
		case err != nil:
			writeJSON(w, http.StatusInternalServerError, errorJSON("internal"))
		default:
			writeJSON(w, http.StatusCreated, body)
		}
	})
}

// writeJSON writes a JSON answer.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
