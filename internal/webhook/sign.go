package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// The headers of every delivery attempt (docs/contract.md).
const (
	HeaderEventID   = "Oncepay-Event-Id"
	HeaderEventType = "Oncepay-Event-Type"
	HeaderAttempt   = "Oncepay-Delivery-Attempt"
	HeaderSignature = "Oncepay-Signature"
)

// Sign is the Oncepay-Signature of body sent at t: "t=<unix seconds>" and one "v1=<hex
// HMAC-SHA256 of "<t>.<body>">" per secret (two during a rotation). The timestamp is inside
// the MAC, so that a receiver that refuses an old t refuses a captured attempt replayed later.
func Sign(secrets []string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	parts := []string{"t=" + ts}
	for _, s := range secrets {
		mac := hmac.New(sha256.New, []byte(s))
		mac.Write([]byte(ts))
		mac.Write([]byte("."))
		mac.Write(body)
		parts = append(parts, "v1="+hex.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(parts, ",")
}
