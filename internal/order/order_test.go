package order

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/platform/apperr"
)

// statuses is every order status.
var statuses = []Status{PendingPayment, Paid, Cancelled, Closed}

// TestFrom is the transition table of docs/contract.md, cell by cell: PENDING_PAYMENT may become
// PAID, CANCELLED or CLOSED and nothing else moves, so no late copy or late job can move an
// order out of PAID (I1, I5) or back to PENDING_PAYMENT.
func TestFrom(t *testing.T) {
	allowed := map[[2]Status]bool{
		{PendingPayment, Paid}:      true,
		{PendingPayment, Cancelled}: true,
		{PendingPayment, Closed}:    true,
	}
	for _, from := range statuses {
		for _, to := range statuses {
			name := fmt.Sprintf("%s_to_%s", from, to)
			t.Run(name, func(t *testing.T) {
				if got, want := slices.Contains(From(to), from), allowed[[2]Status{from, to}]; got != want {
					t.Errorf("%s → %s allowed = %v, want %v (From(%s) = %v)", from, to, got, want, to, From(to))
				}
			})
		}
	}
}

// nLines returns n distinct lines of quantity q.
func nLines(n int, q int64) []Line {
	out := make([]Line, n)
	for i := range out {
		out[i] = Line{SKU: fmt.Sprintf("SKU-%d", i), Quantity: q}
	}
	return out
}

// TestValidate checks the order limits of docs/contract.md at and just past each bound.
func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		lines []Line
		valid bool
	}{
		{"validOneLine", nLines(1, 1), true},
		{"validMaxLines", nLines(MaxItems, 1), true},
		{"validMaxQuantity", nLines(1, MaxQuantity), true},
		{"validLongSKU", []Line{{SKU: strings.Repeat("S", 64), Quantity: 1}}, true},
		{"invalidNoLines", nil, false},
		{"invalidTooManyLines", nLines(MaxItems+1, 1), false},
		{"invalidQuantityZero", nLines(1, 0), false},
		{"invalidQuantityNegative", nLines(1, -1), false},
		{"invalidQuantityAboveMax", nLines(1, MaxQuantity+1), false},
		{"invalidDuplicateSKU", []Line{{SKU: "SKU-1", Quantity: 1}, {SKU: "SKU-2", Quantity: 1}, {SKU: "SKU-1", Quantity: 2}}, false},
		{"invalidEmptySKU", []Line{{SKU: "", Quantity: 1}}, false},
		{"invalidLongSKU", []Line{{SKU: strings.Repeat("S", 65), Quantity: 1}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.lines)
			switch {
			case tt.valid && err != nil:
				t.Errorf("Validate: %v, want nil", err)
			case !tt.valid && !errors.Is(err, apperr.ErrInvalidRequest):
				t.Errorf("Validate: %v, want invalid_request", err)
			}
		})
	}
}
