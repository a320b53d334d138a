// Package reportsig signs and verifies the reports a payment channel sends oncepay — trade,
// recharge and refund notifications, over HTTP and Kafka — the way Stripe signs its webhooks:
//
//	X-Signature: t=<unix seconds>,v1=<lowercase hex HMAC-SHA256 of "<t>.<kind>.<raw body>">
//
// The timestamp binds a signature to a moment, so that a report captured once cannot be
// replayed after the tolerance (I13: a captured report, sent again once its dedup record was
// purged); the kind binds it to a purpose, so that a trade report cannot be posted as a
// recharge. The earlier form, a bare HMAC of the body, is refused. The channel simulator and
// oncepay share this one implementation; docs/contract.md describes the migration.
package reportsig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Header is the HTTP header, and the Kafka header, that carries the signature.
const Header = "X-Signature"

// The ways a signature is refused.
var (
	// ErrMalformed is a header that is not t=<unix seconds>,v1=<64 lowercase hex digits>
	// (one or more v1), such as the earlier bare HMAC.
	ErrMalformed = errors.New("X-Signature must be t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<kind>.<body>\">")
	// ErrMismatch is a well-formed header none of whose v1 values is the HMAC of this body,
	// this kind and this timestamp under the channel's secret.
	ErrMismatch = errors.New("X-Signature does not match the body, the kind of report or the timestamp")
	// ErrStale is a signature whose timestamp lies further from now than the tolerance.
	ErrStale = errors.New("X-Signature's timestamp is outside the tolerance")
)

// Sign returns the X-Signature of body, a report of kind, signed at t with secret.
func Sign(secret string, t time.Time, kind string, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, kind, body)
}

// Verify checks header, the X-Signature of body, a report of kind: well-formed, one of its
// v1 values the HMAC under secret (compared in constant time), and its timestamp within
// tolerance of now, either way.
func Verify(secret, header, kind string, body []byte, now time.Time, tolerance time.Duration) error {
	ts, sigs, err := parse(header)
	if err != nil {
		return err
	}
	want := []byte(mac(secret, ts, kind, body))
	ok := false
	for _, s := range sigs {
		ok = hmac.Equal([]byte(s), want) || ok
	}
	if !ok {
		return ErrMismatch
	}
	sec, _ := strconv.ParseInt(ts, 10, 64)
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrStale
	}
	return nil
}

func mac(secret, ts, kind string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write([]byte(kind))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// parse splits header into its timestamp and its v1 values, in the one form Sign writes: the
// timestamp first, 1 to 12 decimal digits, then one or more v1 of 64 lowercase hex digits.
func parse(header string) (ts string, sigs []string, err error) {
	parts := strings.Split(header, ",")
	t, ok := strings.CutPrefix(parts[0], "t=")
	if !ok || len(parts) < 2 || !digits(t) {
		return "", nil, ErrMalformed
	}
	for _, p := range parts[1:] {
		v, ok := strings.CutPrefix(p, "v1=")
		if !ok || !lowerHex(v) {
			return "", nil, ErrMalformed
		}
		sigs = append(sigs, v)
	}
	return t, sigs, nil
}

func digits(s string) bool {
	if len(s) == 0 || len(s) > 12 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func lowerHex(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && (s[i] < 'a' || s[i] > 'f') {
			return false
		}
	}
	return true
}
