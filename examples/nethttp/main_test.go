package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/oncepay/oncepay/idempotent/idemtest"
)

// TestOnePostOneRow: on every dialect, twenty copies of one POST at once write one note;
// every copy is answered 201 with the same note, or 409 while the first runs; the key
// with another body is 422.
func TestOnePostOneRow(t *testing.T) {
	for _, dialect := range idemtest.Dialects(t) {
		t.Run(dialect, func(t *testing.T) {
			db := idemtest.DB(t, dialect)
			if err := Setup(db); err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(Handler(db, idemtest.Redis(t)))
			defer srv.Close()
			post := func(body string) (int, string) {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/notes", strings.NewReader(body))
				req.Header.Set("Idempotency-Key", "note-1")
				req.Header.Set("X-User", "7")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return 0, ""
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				return res.StatusCode, string(b)
			}
			var wg sync.WaitGroup
			bodies := make([]string, 20)
			for i := range bodies {
				wg.Go(func() {
					if status, b := post(`{"text":"hello"}`); status == http.StatusCreated {
						bodies[i] = b
					}
				})
			}
			wg.Wait()
			var notes int64
			db.Model(&Note{}).Count(&notes)
			if notes != 1 {
				t.Fatalf("%d notes, want 1", notes)
			}
			status, first := post(`{"text":"hello"}`)
			for _, b := range bodies {
				if b != "" && b != first {
					t.Errorf("answers differ: %s and %s", b, first)
				}
			}
			if status != http.StatusCreated || !strings.Contains(first, `"text":"hello"`) {
				t.Errorf("the replay: %d %s", status, first)
			}
			if status, b := post(`{"text":"other"}`); status != http.StatusUnprocessableEntity {
				t.Errorf("another body under the key: %d %s, want 422", status, b)
			}
		})
	}
}
