// Command nethttp is the smallest service on the idempotency kit: POST /notes writes one row
// per Idempotency-Key, however many copies arrive from however many instances (a client's
// retry, a gateway's, a double click); later copies get the first answer, Idempotent-Replayed.
//
//	go run ./nethttp -db notes.db -redis 127.0.0.1:6379
//	curl -i -X POST -H 'Idempotency-Key: k1' -H 'X-User: 7' -d '{"text":"hi"}' localhost:8081/notes
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log"
	"net/http"

	"github.com/glebarez/sqlite"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
)

// Note is a row of notes, the write that must happen once.
type Note struct {
	ID   int64  `json:"id"`
	User string `json:"user"`
	Text string `json:"text"`
}

func main() {
	file, addr := flag.String("db", "notes.db", "SQLite file"), flag.String("redis", "127.0.0.1:6379", "Redis")
	flag.Parse()
	db, err := gorm.Open(sqlite.Open(*file), &gorm.Config{})
	if err == nil {
		err = Setup(db)
	}
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8081", Handler(db, redis.NewClient(&redis.Options{Addr: *addr}))))
}

// Setup creates the notes table and the kit's idempotency_records.
func Setup(db *gorm.DB) error {
	return errors.Join(db.AutoMigrate(&Note{}), idempotent.CreateSchema(db))
}

// Handler serves POST /notes; keys are per user (X-User here, a real service's authentication).
func Handler(db *gorm.DB, rdb redis.UniversalClient) http.Handler {
	h := httpkey.Handler{Guard: idempotent.New(db, rdb, idempotent.Config{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /notes", func(w http.ResponseWriter, r *http.Request) {
		user := r.Header.Get("X-User")
		key, err := httpkey.Key(r, "user:"+user)
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		var note Note
		if err == nil && (json.Unmarshal(body, &note) != nil || note.Text == "") {
			err = &idempotent.Error{Code: "invalid_request", Detail: `the body must be {"text":"…"}`}
		}
		if err != nil { // refused before the key is claimed: nothing is stored
			httpkey.DefaultProblem(w, r, http.StatusBadRequest, err)
			return
		}
		_, _ = h.Do(w, r, key, body, idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
			note.User = user
			if err := tx.Create(&note).Error; err != nil { // on tx: it commits with the record
				return idempotent.Response{}, err
			}
			out, _ := json.Marshal(note)
			return idempotent.Response{Status: http.StatusCreated, Header: map[string]string{"Content-Type": "application/json"}, Body: out}, nil
		}))
	})
	return mux
}
