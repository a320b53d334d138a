package inventory_test

import (
	"maps"
	"net/http"
	"testing"

	"github.com/oncepay/oncepay/internal/inventory"
	"github.com/oncepay/oncepay/internal/testsupport/apptest"
)

// TestInventoryHTTP covers the stock routes: the public read, and the admin write with its
// validation; a refused write changes nothing.
func TestInventoryHTTP(t *testing.T) {
	s := apptest.StartOnly(t, apptest.Router)
	tests := []struct {
		name   string
		method string
		path   string
		apiKey string
		body   any
		status int
		code   string
	}{
		{"get200", http.MethodGet, "/v1/inventory/SKU-1001", "", nil, http.StatusOK, ""},
		{"get404UnknownSKU", http.MethodGet, "/v1/inventory/SKU-NOPE", "", nil, http.StatusNotFound, "not_found"},
		{"put200", http.MethodPut, "/v1/admin/inventory/SKU-NEW", apptest.AdminKey, map[string]int64{"price": 5, "available": 9}, http.StatusOK, ""},
		{"put400NegativePrice", http.MethodPut, "/v1/admin/inventory/SKU-1001", apptest.AdminKey, map[string]int64{"price": -1, "available": 9}, http.StatusBadRequest, "invalid_request"},
		{"put400NoAvailable", http.MethodPut, "/v1/admin/inventory/SKU-1001", apptest.AdminKey, map[string]int64{"price": 1}, http.StatusBadRequest, "invalid_request"},
		{"put400TooMuch", http.MethodPut, "/v1/admin/inventory/SKU-1001", apptest.AdminKey, map[string]int64{"price": 1, "available": inventory.MaxAmount + 1}, http.StatusBadRequest, "invalid_request"},
		{"put400Malformed", http.MethodPut, "/v1/admin/inventory/SKU-1001", apptest.AdminKey, `{"price":`, http.StatusBadRequest, "invalid_request"},
		{"put403UserKey", http.MethodPut, "/v1/admin/inventory/SKU-1001", apptest.AliceKey, map[string]int64{"price": 1, "available": 1}, http.StatusForbidden, "forbidden"},
		{"put401NoKey", http.MethodPut, "/v1/admin/inventory/SKU-1001", "", map[string]int64{"price": 1, "available": 1}, http.StatusUnauthorized, "unauthorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := s.Snapshot(t)
			r := s.Do(tt.method, tt.path, tt.apiKey, tt.body, nil)
			if tt.code != "" {
				apptest.WantProblem(t, r, tt.status, tt.code)
				if diff := before.Diff(s.Snapshot(t)); len(diff) != 0 {
					t.Errorf("a refused request changed %v", apptest.Snapshot(diff))
				}
				return
			}
			apptest.Must(t, r, tt.status)
			var v inventory.View
			r.Decode(t, &v)
			if db := s.Inventory(t, v.SKU); v.Available != db.Available || v.Price != db.Price || v.Reserved != db.Reserved || v.Sold != db.Sold {
				t.Errorf("answered %+v, database holds %+v", v, db)
			}
		})
	}
	// PUT is naturally idempotent: the same absolute values again change nothing more.
	before := s.Snapshot(t)
	s.PutInventory(t, "SKU-NEW", 5, 9)
	if diff := before.Diff(s.Snapshot(t)); !maps.Equal(diff, map[string]int64{}) {
		t.Errorf("repeating a PUT changed %v", apptest.Snapshot(diff))
	}
}
