package inventory_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestValidSKU checks the SKU charset of docs/contract.md: [A-Za-z0-9._-]{1,64}.
func TestValidSKU(t *testing.T) {
	tests := []struct {
		sku   string
		valid bool
	}{
		{"SKU-1001", true},
		{"a.b_c-D9", true},
		{strings.Repeat("S", 64), true},
		{"", false},
		{strings.Repeat("S", 65), false},
		{"SKU 1", false},
		{"SKU/1", false},
		{"SKU%2D1", false},
		{"SKÜ", false},
		{"SKU\xff", false},
		{"SKU\x00", false},
		{"SKU\n", false},
	}
	for _, tt := range tests {
		if got := inventory.ValidSKU(tt.sku); got != tt.valid {
			t.Errorf("ValidSKU(%q) = %v, want %v", tt.sku, got, tt.valid)
		}
		if err := inventory.CheckSKU("sku", tt.sku); (err == nil) != tt.valid || (err != nil && !errors.Is(err, apperr.ErrInvalidRequest)) {
			t.Errorf("CheckSKU(%q) = %v", tt.sku, err)
		}
	}
}

// TestInventorySKUPath checks the {sku} path parameter of both inventory routes: refused
// with 400 invalid_request and no change unless it is a valid SKU once percent-decoded, and
// decoded the same way on both, so that ENC%2D1 is the SKU ENC-1, never stored literally.
func TestInventorySKUPath(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	body := map[string]int64{"price": 5, "available": 9}
	for _, path := range []string{
		"SKU%201",               // a space
		"SKU%2F1",               // a slash
		"SKU%FF",                // invalid UTF-8: a 500 on MySQL before
		"%C3%A9",                // valid UTF-8, outside the charset
		strings.Repeat("S", 65), // too long
	} {
		t.Run(path, func(t *testing.T) {
			before := s.Snapshot(t)
			apptest.WantProblem(t, s.Do(http.MethodPut, "/v1/admin/inventory/"+path, apptest.AdminKey, body, nil), http.StatusBadRequest, "invalid_request")
			apptest.WantProblem(t, s.Do(http.MethodGet, "/v1/inventory/"+path, "", nil, nil), http.StatusBadRequest, "invalid_request")
			if diff := before.Diff(s.Snapshot(t)); len(diff) != 0 {
				t.Errorf("a refused PUT changed %v", apptest.Snapshot(diff))
			}
		})
	}

	t.Run("escaped SKU", func(t *testing.T) {
		r := apptest.Must(t, s.Do(http.MethodPut, "/v1/admin/inventory/ENC%2D1", apptest.AdminKey, body, nil), http.StatusOK)
		var v inventory.View
		r.Decode(t, &v)
		if v.SKU != "ENC-1" {
			t.Errorf("PUT ENC%%2D1 answered SKU %q, want ENC-1", v.SKU)
		}
		for _, path := range []string{"ENC-1", "ENC%2D1", "%45NC%2d1"} {
			r := apptest.Must(t, s.Do(http.MethodGet, "/v1/inventory/"+path, "", nil, nil), http.StatusOK)
			var got inventory.View
			r.Decode(t, &got)
			if got.SKU != "ENC-1" || got.Available != 9 {
				t.Errorf("GET %s = %+v, want ENC-1 with 9 available", path, got)
			}
		}
		if n := s.Count(t, "inventory", "sku LIKE ?", "ENC%"); n != 1 {
			t.Errorf("%d inventory rows for ENC-1, want 1 (nothing stored with its escapes)", n)
		}
		long := "SKU%2D" + strings.Repeat("S", 60) // 66 characters as sent, 64 once decoded
		apptest.Must(t, s.Do(http.MethodPut, "/v1/admin/inventory/"+long, apptest.AdminKey, body, nil), http.StatusOK)
	})
}

// TestInventoryPutRanges checks the admin PUT's ranges: price 1..10^10 (a price of 0 would
// make orders nobody can pay), available 0..10^10.
func TestInventoryPutRanges(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	tests := []struct {
		name             string
		price, available int64
		status           int
	}{
		{"price0", 0, 1, http.StatusBadRequest},
		{"price1", 1, 1, http.StatusOK},
		{"priceMax", inventory.MaxAmount, 1, http.StatusOK},
		{"priceAboveMax", inventory.MaxAmount + 1, 1, http.StatusBadRequest},
		{"available0", 1, 0, http.StatusOK},
		{"availableNegative", 1, -1, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.Inventory(t, "SKU-1002")
			r := s.Do(http.MethodPut, "/v1/admin/inventory/SKU-1002", apptest.AdminKey, map[string]int64{"price": tt.price, "available": tt.available}, nil)
			if tt.status == http.StatusOK {
				apptest.Must(t, r, http.StatusOK)
				return
			}
			apptest.WantProblem(t, r, tt.status, "invalid_request")
			if after := s.Inventory(t, "SKU-1002"); after.Price != before.Price || after.Version != before.Version {
				t.Errorf("a refused PUT changed %+v into %+v", before, after)
			}
		})
	}
}

// etagOf reads the ETag of GET /v1/inventory/{sku}.
func etagOf(t *testing.T, s *apptest.Server, sku string) string {
	t.Helper()
	r := apptest.Must(t, s.Do(http.MethodGet, "/v1/inventory/"+sku, "", nil, nil), http.StatusOK)
	tag := r.Header.Get("ETag")
	if want := strconv.Quote(strconv.FormatInt(s.Inventory(t, sku).Version, 10)); tag != want {
		t.Fatalf("ETag %q, want the version %s", tag, want)
	}
	return tag
}

// TestInventoryIfMatch walks the optimistic admin PUT: the ETag of a read makes a write that
// succeeds once; the same ETag again is stale and gets 412 precondition_failed, changing
// nothing; a write without If-Match stays an absolute upsert.
func TestInventoryIfMatch(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	put := func(sku, ifMatch string, price, available int64) apptest.Response {
		var h map[string]string
		if ifMatch != "" {
			h = map[string]string{"If-Match": ifMatch}
		}
		return s.Do(http.MethodPut, "/v1/admin/inventory/"+sku, apptest.AdminKey, map[string]int64{"price": price, "available": available}, h)
	}
	wantUnchanged := func(t *testing.T, r apptest.Response, status int, code, sku string, before inventory.Item) {
		t.Helper()
		apptest.WantProblem(t, r, status, code)
		after := s.Inventory(t, sku)
		if after.Price != before.Price || after.Available != before.Available || after.Version != before.Version {
			t.Errorf("a refused PUT changed %+v into %+v", before, after)
		}
	}

	tag := etagOf(t, s, "SKU-1001")
	r := apptest.Must(t, put("SKU-1001", tag, 100, 50), http.StatusOK)
	if got, want := r.Header.Get("ETag"), etagOf(t, s, "SKU-1001"); got != want || got == tag {
		t.Errorf("the PUT answered ETag %q; want the new version %q, not the old %q", got, want, tag)
	}

	before := s.Inventory(t, "SKU-1001")
	wantUnchanged(t, put("SKU-1001", tag, 200, 60), http.StatusPreconditionFailed, "precondition_failed", "SKU-1001", before)
	wantUnchanged(t, put("SKU-1001", `W/`+etagOf(t, s, "SKU-1001"), 200, 60), http.StatusPreconditionFailed, "precondition_failed", "SKU-1001", before)
	wantUnchanged(t, put("SKU-1001", `"abc"`, 200, 60), http.StatusPreconditionFailed, "precondition_failed", "SKU-1001", before)
	wantUnchanged(t, put("SKU-1001", `3`, 200, 60), http.StatusBadRequest, "invalid_request", "SKU-1001", before)
	wantUnchanged(t, put("SKU-1001", ` , `, 200, 60), http.StatusBadRequest, "invalid_request", "SKU-1001", before)

	// A list matches when one of its tags does; "*" matches any version of an existing SKU.
	apptest.Must(t, put("SKU-1001", `"999999", `+etagOf(t, s, "SKU-1001"), 300, 70), http.StatusOK)
	apptest.Must(t, put("SKU-1001", `*`, 300, 71), http.StatusOK)

	// If-Match never creates: there is no version of an unknown SKU to match.
	if r := put("SKU-NEW-IFM", `"0"`, 1, 1); r.Status != http.StatusPreconditionFailed {
		t.Errorf("If-Match on an unknown SKU: %s, want 412", r)
	}
	if r := put("SKU-NEW-IFM", `*`, 1, 1); r.Status != http.StatusPreconditionFailed {
		t.Errorf("If-Match: * on an unknown SKU: %s, want 412", r)
	}
	if n := s.Count(t, "inventory", "sku = ?", "SKU-NEW-IFM"); n != 0 {
		t.Errorf("a conditional PUT created the SKU")
	}

	// Without If-Match the PUT is the absolute upsert it was, even after other writes.
	apptest.Must(t, put("SKU-1001", "", 400, 80), http.StatusOK)
	if it := s.Inventory(t, "SKU-1001"); it.Price != 400 || it.Available != 80 {
		t.Errorf("after an unconditional PUT: %+v, want price 400 available 80", it)
	}
}

// TestInventoryIfMatchRace is the read-modify-write race the version column exists for: many
// admins read the same ETag, each computes a new stock from it and writes it back with
// If-Match at the same moment. Exactly one wins each round; every other gets 412 and changes
// nothing. It runs on MySQL or SQLite, whichever the suite uses.
func TestInventoryIfMatchRace(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	const writers, rounds = 6, 5
	for round := range rounds {
		tag := etagOf(t, s, "SKU-1002")
		base := s.Inventory(t, "SKU-1002")
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			statuses       = map[int]int{}
			winner   int64 = -1
			start          = make(chan struct{})
		)
		for w := range writers {
			wg.Go(func() {
				<-start
				available := base.Available + int64(w) + 1 // each writer's own read-modify-write
				r := s.Do(http.MethodPut, "/v1/admin/inventory/SKU-1002", apptest.AdminKey,
					map[string]int64{"price": base.Price, "available": available}, map[string]string{"If-Match": tag})
				mu.Lock()
				defer mu.Unlock()
				statuses[r.Status]++
				switch r.Status {
				case http.StatusOK:
					winner = available
				case http.StatusPreconditionFailed:
					if c := r.Code(); c != "precondition_failed" {
						t.Errorf("412 with code %q", c)
					}
				default:
					t.Errorf("writer %d: %s", w, r)
				}
			})
		}
		close(start)
		wg.Wait()
		if statuses[http.StatusOK] != 1 || statuses[http.StatusPreconditionFailed] != writers-1 {
			t.Fatalf("round %d: statuses %v, want exactly one 200 and %d × 412", round, statuses, writers-1)
		}
		after := s.Inventory(t, "SKU-1002")
		if after.Available != winner || after.Version != base.Version+1 {
			t.Errorf("round %d: stock %+v, want the winner's %d at version %d", round, after, winner, base.Version+1)
		}
	}
}

// TestPutIfVersionRace is the same race on the store alone, without HTTP: of two writers at
// the same version, exactly one updates.
func TestPutIfVersionRace(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for round := range 10 {
		it, err := e.store.Get(ctx, "A")
		if err != nil {
			t.Fatal(err)
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = e.store.PutIfVersion(ctx, "A", 100, int64(round*10+i), []int64{it.Version})
			})
		}
		wg.Wait()
		wins, stale := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				wins++
			case errors.Is(err, apperr.ErrPreconditionFailed):
				stale++
			default:
				t.Fatalf("PutIfVersion: %v", err)
			}
		}
		if wins != 1 || stale != 1 {
			t.Fatalf("round %d: %d wins and %d stale, want 1 and 1 (%v)", round, wins, stale, errs)
		}
	}
}
