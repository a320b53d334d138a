package order

import (
	"errors"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/platform/apperr"
)

// TestValidateSKUCharset checks that Validate refuses a SKU outside [A-Za-z0-9._-]{1,64}
// (docs/contract.md "Other error codes") and that every refusal names the line's JSON field.
func TestValidateSKUCharset(t *testing.T) {
	tests := []struct {
		name  string
		lines []Line
		field string // "" for valid
	}{
		{"charset", []Line{{SKU: "Az09._-", Quantity: 1}}, ""},
		{"space", []Line{{SKU: "SKU 1", Quantity: 1}}, "items[0].sku"},
		{"slash", []Line{{SKU: "SKU-1", Quantity: 1}, {SKU: "SKU/2", Quantity: 1}}, "items[1].sku"},
		{"percent", []Line{{SKU: "ENC%2D1", Quantity: 1}}, "items[0].sku"},
		{"non-ASCII", []Line{{SKU: "SKÜ", Quantity: 1}}, "items[0].sku"},
		{"invalid UTF-8", []Line{{SKU: "SKU\xff", Quantity: 1}}, "items[0].sku"},
		{"NUL", []Line{{SKU: "SKU\x00", Quantity: 1}}, "items[0].sku"},
		{"too long", []Line{{SKU: strings.Repeat("s", 65), Quantity: 1}}, "items[0].sku"},
		{"quantity", []Line{{SKU: "A", Quantity: 1}, {SKU: "B", Quantity: MaxQuantity + 1}}, "items[1].quantity"},
		{"duplicate", []Line{{SKU: "A", Quantity: 1}, {SKU: "A", Quantity: 1}}, "items[1].sku"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.lines)
			if tt.field == "" {
				if err != nil {
					t.Errorf("Validate: %v, want nil", err)
				}
				return
			}
			e, ok := apperr.As(err)
			if !ok || !errors.Is(err, apperr.ErrInvalidRequest) || !strings.Contains(e.Detail, tt.field) {
				t.Errorf("Validate: %v, want invalid_request naming %s", err, tt.field)
			}
		})
	}
}
