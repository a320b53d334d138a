// Command chirouter is the kit behind a chi router: POST /accounts/{id}/deposits credits an
// account once per Idempotency-Key. The work places its own dedup record — after the new row,
// before the contended balance row — so a duplicate is refused before it waits on that row.
//
//	go run ./chirouter -db bank.db -redis 127.0.0.1:6379
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log"
	"net/http"
	"strconv"

	"github.com/glebarez/sqlite"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
)

// Deposit is one credit; Account the balance it moves.
type (
	Deposit struct{ ID, Account, Amount int64 }
	Account struct{ ID, Balance int64 }
)

func main() {
	file, addr := flag.String("db", "bank.db", "SQLite file"), flag.String("redis", "127.0.0.1:6379", "Redis")
	flag.Parse()
	db, err := gorm.Open(sqlite.Open(*file), &gorm.Config{})
	if err == nil {
		err = errors.Join(db.AutoMigrate(&Deposit{}, &Account{}), idempotent.CreateSchema(db))
	}
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8082", Router(db, redis.NewClient(&redis.Options{Addr: *addr}))))
}

// Router serves POST /accounts/{id}/deposits {"amount":N}.
func Router(db *gorm.DB, rdb redis.UniversalClient) http.Handler {
	h := httpkey.Handler{Guard: idempotent.New(db, rdb, idempotent.Config{})}
	r := chi.NewRouter()
	r.Post("/accounts/{id}/deposits", func(w http.ResponseWriter, r *http.Request) {
		key, err := httpkey.Key(r, "account:"+chi.URLParam(r, "id"))
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		var d Deposit
		account, perr := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
		if err == nil && (perr != nil || json.Unmarshal(body, &d) != nil || d.Amount < 1) {
			err = &idempotent.Error{Code: "invalid_request", Detail: `POST /accounts/{id}/deposits {"amount":N}, N > 0`}
		}
		if err != nil {
			httpkey.DefaultProblem(w, r, http.StatusBadRequest, err)
			return
		}
		_, _ = h.Do(w, r, key, body, func(_ context.Context, tx *gorm.DB, record func(idempotent.Response) error) error {
			d.Account = account
			if err := tx.Create(&d).Error; err != nil {
				return err
			}
			out, _ := json.Marshal(d)
			if err := record(idempotent.Response{Status: http.StatusCreated, Body: out}); err != nil {
				return err // a duplicate: the guard answers with the first attempt's deposit
			}
			return tx.Model(&Account{ID: d.Account}).Update("balance", gorm.Expr("balance + ?", d.Amount)).Error
		})
	})
	return r
}
