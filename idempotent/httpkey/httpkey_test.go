package httpkey_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/oncepay/oncepay/idempotent"
	"github.com/oncepay/oncepay/idempotent/httpkey"
	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// TestHandler drives a POST through httpkey with nothing set but the database and Redis:
// twenty copies at once execute once; a replay is the same bytes with Idempotent-Replayed;
// the key with another body is 422; no key is 400; every answer says its outcome.
func TestHandler(t *testing.T) {
	dialect := idemtest.Default()
	db := idemtest.DB(t, dialect)
	if err := db.Exec("CREATE TABLE notes (id INTEGER PRIMARY KEY, body VARCHAR(64) NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	h := httpkey.Handler{Guard: idempotent.New(db, idemtest.Redis(t), idempotent.Config{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, err := httpkey.Key(r, "user:1")
		if err != nil {
			h.Write(w, r, idempotent.Result{}, err)
			return
		}
		body, _ := io.ReadAll(r.Body)
		_, _ = h.Do(w, r, key, body, idempotent.Respond(func(_ context.Context, tx *gorm.DB) (idempotent.Response, error) {
			var n int64
			if err := tx.Table("notes").Count(&n).Error; err != nil {
				return idempotent.Response{}, err
			}
			if err := tx.Exec("INSERT INTO notes (id, body) VALUES (?, ?)", n+1, string(body)).Error; err != nil {
				return idempotent.Response{}, err
			}
			return idempotent.Response{Status: http.StatusCreated, Body: []byte(`{"note":` + string(rune('0'+n+1)) + `}`)}, nil
		}))
	}))
	defer srv.Close()
	post := func(key, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/notes", strings.NewReader(body))
		if key != "" {
			req.Header.Set(httpkey.HeaderKey, key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = map[string]int{}
	)
	for range 20 {
		wg.Go(func() {
			res := post("k-1", `{"text":"hello"}`)
			res.Body.Close()
			mu.Lock()
			outcomes[res.Header.Get(httpkey.HeaderOutcome)]++
			mu.Unlock()
		})
	}
	wg.Wait()
	var notes int64
	db.Table("notes").Count(&notes)
	if notes != 1 || outcomes["executed"] != 1 {
		t.Fatalf("%d notes, outcomes %v; want one note, executed once", notes, outcomes)
	}
	res := post("k-1", `{"text":"hello"}`)
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusCreated || res.Header.Get(httpkey.HeaderReplayed) != "true" || string(b) != `{"note":1}` {
		t.Errorf("replay: %d %q %s", res.StatusCode, res.Header.Get(httpkey.HeaderReplayed), b)
	}
	for _, tt := range []struct {
		key, body string
		status    int
		code      string
	}{
		{"k-1", `{"text":"other"}`, http.StatusUnprocessableEntity, "idempotency_key_reused"},
		{"", `{}`, http.StatusBadRequest, "idempotency_key_missing"},
		{"bad key", `{}`, http.StatusBadRequest, "idempotency_key_invalid"},
	} {
		res := post(tt.key, tt.body)
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != tt.status || !strings.Contains(string(b), tt.code) || res.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("key %q: %d %s, want %d %s", tt.key, res.StatusCode, b, tt.status, tt.code)
		}
	}
}
