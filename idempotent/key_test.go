package idempotent_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/idempotent"
)

// TestStorable covers each row of the outcome table in doc.go.
func TestStorable(t *testing.T) {
	tests := []struct {
		row    string
		status int
		want   bool
	}{
		{"2xx: the write happened", http.StatusOK, true},
		{"2xx: the write happened", http.StatusCreated, true},
		{"2xx: the write happened", http.StatusAccepted, true},
		{"2xx: the write happened", http.StatusNoContent, true},
		{"2xx: the write happened", 299, true},
		{"4xx business outcome", http.StatusBadRequest, true},
		{"4xx business outcome", http.StatusNotFound, true},
		{"4xx business outcome", http.StatusConflict, true},
		{"4xx business outcome", http.StatusGone, true},
		{"4xx business outcome", http.StatusRequestEntityTooLarge, true},
		{"4xx business outcome", http.StatusUnprocessableEntity, true},
		{"about the caller or the moment", http.StatusUnauthorized, false},
		{"about the caller or the moment", http.StatusForbidden, false},
		{"about the caller or the moment", http.StatusRequestTimeout, false},
		{"about the caller or the moment", http.StatusTooManyRequests, false},
		{"5xx: nothing happened", http.StatusInternalServerError, false},
		{"5xx: nothing happened", http.StatusBadGateway, false},
		{"5xx: nothing happened", http.StatusServiceUnavailable, false},
		{"5xx: nothing happened", http.StatusGatewayTimeout, false},
		{"5xx: nothing happened", 599, false},
		{"no status: the work answered nothing", 0, false},
		{"not a final answer", http.StatusContinue, false},
		{"a redirect is not a write outcome", http.StatusFound, false},
	}
	for _, tt := range tests {
		if got := idempotent.Storable(tt.status); got != tt.want {
			t.Errorf("Storable(%d) = %v, want %v (%s)", tt.status, got, tt.want, tt.row)
		}
	}
}

// TestFingerprint: JSON key order and whitespace do not change a fingerprint; a value, the
// method or the route does.
func TestFingerprint(t *testing.T) {
	const route = "/v1/orders"
	base := idempotent.Fingerprint("POST", route, []byte(`{"items":[{"sku":"SKU-1001","quantity":1}],"note":"a"}`))
	same := []struct {
		name, method, route, body string
	}{
		{"key order", "POST", route, `{"note":"a","items":[{"quantity":1,"sku":"SKU-1001"}]}`},
		{"whitespace", "POST", route, " {\n  \"items\": [ { \"sku\": \"SKU-1001\", \"quantity\": 1 } ],\t\"note\": \"a\" }\n"},
		{"method case", "post", route, `{"items":[{"sku":"SKU-1001","quantity":1}],"note":"a"}`},
	}
	for _, tt := range same {
		if got := idempotent.Fingerprint(tt.method, tt.route, []byte(tt.body)); got != base {
			t.Errorf("%s changed the fingerprint", tt.name)
		}
	}
	different := []struct {
		name, method, route, body string
	}{
		{"a value", "POST", route, `{"items":[{"sku":"SKU-1001","quantity":2}],"note":"a"}`},
		{"a string value", "POST", route, `{"items":[{"sku":"SKU-1002","quantity":1}],"note":"a"}`},
		{"number text", "POST", route, `{"items":[{"sku":"SKU-1001","quantity":1.0}],"note":"a"}`},
		{"array order", "POST", route, `{"items":[{"sku":"SKU-1001","quantity":1},{"sku":"SKU-1002","quantity":1}],"note":"a"}`},
		{"an extra field", "POST", route, `{"items":[{"sku":"SKU-1001","quantity":1}],"note":"a","x":null}`},
		{"the method", "PUT", route, `{"items":[{"sku":"SKU-1001","quantity":1}],"note":"a"}`},
		{"the route", "POST", "/v1/recharges", `{"items":[{"sku":"SKU-1001","quantity":1}],"note":"a"}`},
		{"no body", "POST", route, ``},
	}
	seen := map[string]string{base: "base"}
	for _, tt := range different {
		got := idempotent.Fingerprint(tt.method, tt.route, []byte(tt.body))
		if prev, dup := seen[got]; dup {
			t.Errorf("changing %s gives the fingerprint of %s", tt.name, prev)
		}
		seen[got] = tt.name
	}
	if len(base) != 64 || strings.Trim(base, "0123456789abcdef") != "" {
		t.Errorf("fingerprint %q is not 64 hex digits", base)
	}
}

// TestCanonical: the canonical form sorts keys at every depth, drops whitespace, keeps
// number text, and leaves a body that is not one JSON value as it is.
func TestCanonical(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":{"d":[3,2],"c":"x"}}`, `{"a":{"c":"x","d":[3,2]},"b":1}`},
		{" [ 1 , 2.50 , 1e3 ] ", `[1,2.50,1e3]`},
		{`{"big":12345678901234567890}`, `{"big":12345678901234567890}`},
		{`not json`, `not json`},
		{`{"a":1} {"a":2}`, `{"a":1} {"a":2}`},
		{"   ", ``},
	}
	for _, tt := range tests {
		if got := string(idempotent.Canonical([]byte(tt.in))); got != tt.want {
			t.Errorf("Canonical(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestValidKey covers the Idempotency-Key rule: 1..255 visible ASCII characters.
func TestValidKey(t *testing.T) {
	tests := []struct {
		name string
		key  string
		want bool
	}{
		{"empty", "", false},
		{"one character", "a", true},
		{"a uuid", "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{"255 characters", strings.Repeat("k", 255), true},
		{"256 characters", strings.Repeat("k", 256), false},
		{"every visible ASCII character", visibleASCII(), true},
		{"inner space", "two words", false},
		{"leading space", " key", false},
		{"tab", "a\tb", false},
		{"newline", "a\nb", false},
		{"NUL", "a\x00b", false},
		{"DEL", "a\x7fb", false},
		{"non-ASCII", "ключ", false},
		{"non-ASCII accent", "café", false},
	}
	for _, tt := range tests {
		if got := idempotent.ValidKey(tt.key); got != tt.want {
			t.Errorf("ValidKey(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// visibleASCII returns the characters 0x21..0x7e.
func visibleASCII() string {
	var b strings.Builder
	for c := byte(0x21); c <= 0x7e; c++ {
		b.WriteByte(c)
	}
	return b.String()
}
