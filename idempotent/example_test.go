package idempotent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/glebarez/sqlite"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/dberr"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/sqliteerr"
)

// These examples are the package documentation's and the README's code, run by go test:
// a stale example fails the build. They run on SQLite (github.com/glebarez/sqlite) and an
// in-process Redis (miniredis), so they need no server; a service opens its own database
// with its dialect's gorm driver and passes its go-redis client.

// stores opens what a service already has: a gorm database (here a SQLite file in a
// temporary directory) holding the kit's table, and a Redis client. close removes both.
func stores() (db *gorm.DB, mr *miniredis.Miniredis, rdb *redis.Client, close func()) {
	dir, err := os.MkdirTemp("", "idempotent-example")
	if err != nil {
		log.Fatal(err)
	}
	dsn := "file:" + filepath.Join(dir, "app.db") + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_txlock=immediate"
	db, err = gorm.Open(sqlite.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	if err := idempotent.CreateSchema(db); err != nil { // or put idempotent.Schema["sqlite"] in your migrations
		log.Fatal(err)
	}
	mr, err = miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	rdb = redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return db, mr, rdb, func() {
		_ = rdb.Close()
		mr.Close()
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
		_ = os.RemoveAll(dir)
	}
}

// note is the business row of the examples.
type note struct {
	ID   int64
	Body string
}

// ExampleGuard_Do is the package documentation's whole use: a key, a fingerprint, and the
// work in the guard's transaction. A second copy of the request is replayed and never runs
// the work; the key with another body is refused.
func ExampleGuard_Do() {
	db, _, rdb, closeAll := stores()
	defer closeAll()
	if err := db.AutoMigrate(&note{}); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	do := func(guard *idempotent.Guard, key string, body []byte) {
		req := idempotent.Request{
			Key:         idempotent.Key{Scope: "user:42", BizType: "note.create", BizKey: key},
			Fingerprint: idempotent.Fingerprint("POST", "/notes", body),
		}
		res, err := guard.Do(ctx, req, idempotent.Respond(func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
			if err := tx.Create(&note{Body: string(body)}).Error; err != nil { // on tx only
				return idempotent.Response{}, err
			}
			return idempotent.Response{Status: http.StatusCreated}, nil
		}))
		fmt.Println(res.Outcome, res.Layer, res.Response.Status, err)
	}

	guard := idempotent.New(db, rdb, idempotent.Config{Classify: sqliteerr.Classify}) // mysqlerr, pgerr
	do(guard, "k-1", []byte(`{"text":"hello"}`))
	do(guard, "k-1", []byte(`{"text":"hello"}`))
	do(guard, "k-1", []byte(`{"text":"bye"}`))
	// Output:
	// executed work 201 <nil>
	// replayed cache 201 <nil>
	// mismatch cache 0 idempotency_key_reused: this key was used with a different request (method, path or body)
}

// Example_handler serves POST /notes through httpkey: the key, the body, then the work in
// the guard's transaction. A retry with the same key is answered from the stored outcome,
// byte for byte; the same key with another body is 422; no key is 400.
func Example_handler() {
	db, _, rdb, closeAll := stores()
	defer closeAll()
	if err := db.AutoMigrate(&note{}); err != nil {
		log.Fatal(err)
	}

	guard := idempotent.New(db, rdb, idempotent.Config{Classify: sqliteerr.Classify})
	h := httpkey.Handler{
		Guard: guard,
		Scope: func(r *http.Request) (string, error) { // whose keys: your authentication
			if user := r.Header.Get("X-User"); user != "" {
				return "user:" + user, nil
			}
			return "", errors.New("not authenticated")
		},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /notes", func(w http.ResponseWriter, r *http.Request) {
		key, err := h.Key(r)
		if err != nil {
			h.Reject(w, r, err) // 400 idempotency_key_missing / _invalid; nothing stored
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			h.Reject(w, r, err)
			return
		}
		_, _ = h.Do(w, r, key, body, idempotent.Respond(func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
			n := note{Body: string(body)}
			if err := tx.Create(&n).Error; err != nil { // on tx only: it commits with the record
				return idempotent.Response{}, err
			}
			return idempotent.Response{
				Status: http.StatusCreated,
				Header: map[string]string{"Content-Type": "application/json"},
				Body:   fmt.Appendf(nil, `{"id":%d}`, n.ID),
			}, nil
		}))
	})

	post := func(key, body string) {
		r := httptest.NewRequest(http.MethodPost, "/notes", strings.NewReader(body))
		r.Header.Set("X-User", "42")
		if key != "" {
			r.Header.Set(httpkey.HeaderKey, key)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get(httpkey.HeaderOutcome), w.Header().Get(httpkey.HeaderReplayed), strings.TrimSpace(w.Body.String()))
	}
	post("k-1", `{"text":"hello"}`) // executes
	post("k-1", `{"text":"hello"}`) // a retry: the stored answer
	post("k-1", `{"text":"bye"}`)   // the key reused for another request
	post("", `{"text":"hello"}`)    // no key
	var notes int64
	db.Model(&note{}).Count(&notes)
	fmt.Println("notes:", notes)
	// Output:
	// 201 executed  {"id":1}
	// 201 replayed true {"id":1}
	// 422 mismatch  {"code":"idempotency_key_reused","detail":"this key was used with a different request (method, path or body)","status":422}
	// 400 rejected  {"code":"idempotency_key_missing","detail":"this endpoint requires an Idempotency-Key header","status":400}
	// notes: 1
}

// ExampleGuard_Message consumes a Kafka-style message exactly once: the message's own id is
// the key, the first delivery executes, a redelivery is acknowledged without running the
// work — from the Redis marker, or from the dedup record once Redis forgot it.
func ExampleGuard_Message() {
	db, mr, rdb, closeAll := stores()
	defer closeAll()
	if err := db.AutoMigrate(&note{}); err != nil {
		log.Fatal(err)
	}
	guard := idempotent.New(db, rdb, idempotent.Config{Classify: sqliteerr.Classify})

	type message struct {
		ID    string // the producer's id of the fact, the same on every redelivery
		Value []byte
	}
	consume := func(ctx context.Context, m message) (ack bool) {
		req := idempotent.Request{
			Key:         idempotent.Key{Scope: "topic:notes", BizType: "note.posted", BizKey: m.ID},
			Fingerprint: idempotent.Fingerprint("CONSUME", "notes", m.Value),
			Via:         "kafka",
		}
		res, err := guard.Message(ctx, req, idempotent.Respond(func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
			if err := tx.Create(&note{Body: string(m.Value)}).Error; err != nil {
				return idempotent.Response{}, err
			}
			return idempotent.Response{Status: http.StatusOK}, nil
		}))
		fmt.Println(m.ID, res.Outcome, res.Layer, err)
		// Acknowledge a copy that executed or was replayed, and a deterministic refusal;
		// anything else is left for redelivery.
		return err == nil || errors.Is(err, idempotent.ErrKeyReused)
	}

	ctx := context.Background()
	m := message{ID: "msg-1", Value: []byte(`{"text":"hello"}`)}
	consume(ctx, m)                                                                  // the first delivery
	consume(ctx, m)                                                                  // a redelivery: the marker says done
	mr.FlushAll()                                                                    // Redis lost its memory (a failover, an eviction),
	guard = idempotent.New(db, rdb, idempotent.Config{Classify: sqliteerr.Classify}) // and the instance restarted
	consume(ctx, m)                                                                  // the record in the database still answers
	var notes int64
	db.Model(&note{}).Count(&notes)
	fmt.Println("notes:", notes)
	// Output:
	// msg-1 executed work <nil>
	// msg-1 replayed message <nil>
	// msg-1 replayed dedup <nil>
	// notes: 1
}

// ExampleGuard_IssueToken is the token flow (I7): the server issues a one-time token before
// it shows a form, and the form's submit carries it as its key. The first submit executes, a
// double click replays it, and a token the server never issued to this user is refused.
func ExampleGuard_IssueToken() {
	db, _, rdb, closeAll := stores()
	defer closeAll()
	if err := db.AutoMigrate(&note{}); err != nil {
		log.Fatal(err)
	}
	guard := idempotent.New(db, rdb, idempotent.Config{Classify: sqliteerr.Classify})
	ctx := context.Background()

	token, _, err := guard.IssueToken(ctx, "user:42") // shown with the form
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("issued a token:", strings.HasPrefix(token, "tok_"))

	body := []byte(`{"text":"hello"}`)
	submit := func(scope, key string) {
		req := idempotent.Request{
			Key:         idempotent.Key{Scope: scope, BizType: "note.create", BizKey: key},
			Fingerprint: idempotent.Fingerprint("POST", "/notes", body),
		}
		res, err := guard.Do(ctx, req, idempotent.Respond(func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
			if err := tx.Create(&note{Body: string(body)}).Error; err != nil {
				return idempotent.Response{}, err
			}
			return idempotent.Response{Status: http.StatusCreated}, nil
		}))
		fmt.Println(res.Outcome, res.Response.Status, err)
	}
	submit("user:42", token)      // the submit
	submit("user:42", token)      // a double click
	submit("user:7", token)       // another user's copy of the token
	submit("user:42", "tok_made") // a token nobody issued
	// Output:
	// issued a token: true
	// executed 201 <nil>
	// replayed 201 <nil>
	// token_invalid 0 idempotency_token_invalid: the tok_ key is not a live token issued to this user; get one from the service's token endpoint
	// token_invalid 0 idempotency_token_invalid: the tok_ key is not a live token issued to this user; get one from the service's token endpoint
}

// claim is a coupon claimed: one per user per campaign, held by the unique index of the
// business's own table.
type claim struct {
	User     string `gorm:"uniqueIndex:one_per_campaign"`
	Campaign string `gorm:"uniqueIndex:one_per_campaign"`
}

// errAlreadyClaimed is the business's refusal, with the code a client sees.
var errAlreadyClaimed = &idempotent.Error{Code: "coupon_already_claimed", Detail: "this user has claimed this campaign's coupon"}

// ExampleConflict stores a refusal of the business's own unique key: a second key claiming
// the same coupon is answered 409, and that 409 is stored and replayed like any answer.
func ExampleConflict() {
	db, _, rdb, closeAll := stores()
	defer closeAll()
	if err := db.AutoMigrate(&claim{}); err != nil {
		log.Fatal(err)
	}
	guard := idempotent.New(db, rdb, idempotent.Config{Classify: sqliteerr.Classify})
	ctx := context.Background()

	claimCoupon := func(key string) {
		req := idempotent.Request{
			Key:         idempotent.Key{Scope: "user:42", BizType: "coupon.claim", BizKey: key},
			Fingerprint: idempotent.Fingerprint("POST", "/campaigns/spring/claims", nil),
		}
		res, err := guard.Do(ctx, req, idempotent.Respond(func(ctx context.Context, tx *gorm.DB) (idempotent.Response, error) {
			if err := tx.Create(&claim{User: "42", Campaign: "spring"}).Error; err != nil {
				if sqliteerr.Classify(err) == dberr.DuplicateKey { // mysqlerr, pgerr
					return idempotent.Response{}, idempotent.Conflict(errors.Join(errAlreadyClaimed, err))
				}
				return idempotent.Response{}, err
			}
			return idempotent.Response{Status: http.StatusCreated}, nil
		}))
		fmt.Println(key, res.Outcome, res.Response.Status, strings.TrimSpace(string(res.Response.Body)), err)
	}
	claimCoupon("k-1") // claims the coupon
	claimCoupon("k-2") // another key, the same coupon: a stored 409
	claimCoupon("k-2") // its retry: the same 409, replayed
	// Output:
	// k-1 executed 201  <nil>
	// k-2 executed 409 {"code":"coupon_already_claimed","detail":"this user has claimed this campaign's coupon","status":409} <nil>
	// k-2 replayed 409 {"code":"coupon_already_claimed","detail":"this user has claimed this campaign's coupon","status":409} <nil>
}
