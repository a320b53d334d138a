// Package requestid carries the request id — taken from X-Request-Id at the entry or
// generated there — through a context, so that every log line, stored record, outbox event
// and Kafka header of one request can be found together (000 §4.1).
package requestid

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

// Header is the HTTP header that carries the request id.
const Header = "X-Request-Id"

type ctxKey struct{}

// New returns a fresh random request id.
func New() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// With returns ctx carrying id.
func With(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

// From returns the request id carried by ctx, or "".
func From(ctx context.Context) string {
	id, _ := ctx.Value(ctxKey{}).(string)
	return id
}

// Valid reports whether a caller-supplied id is safe to echo and log: 1..128 visible ASCII
// characters.
func Valid(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}
