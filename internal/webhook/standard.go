package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers of every attempt (https://www.standardwebhooks.com, the
// specification Svix and many API vendors follow; docs/contract.md). Unlike the legacy
// Oncepay-Signature, the MAC covers the message id: a receiver can trust the event id it
// deduplicates on.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// SecretPrefix starts every signing secret; the rest is the key in standard base64.
const SecretPrefix = "whsec_"

// SigningKey is the HMAC key of a secret as the specification reads it: the base64 after
// whsec_. Secrets made before oncepay used base64 are whsec_ and 64 hex digits, which are
// also valid base64 (48 bytes): a receiver using the specification's library and oncepay
// agree on their key too.
func SigningKey(secret string) []byte {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if err != nil {
		return []byte(secret) // Never made by oncepay; signs with something rather than nothing.
	}
	return key
}

// SignStandard is the webhook-signature of body with id sent at t: "v1,<base64 HMAC-SHA256 of
// "<id>.<unix seconds>.<body>">" per secret, space-separated (two during a rotation's grace).
func SignStandard(secrets []string, id string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	sigs := make([]string, len(secrets))
	for i, s := range secrets {
		mac := hmac.New(sha256.New, SigningKey(s))
		mac.Write([]byte(id))
		mac.Write([]byte("."))
		mac.Write([]byte(ts))
		mac.Write([]byte("."))
		mac.Write(body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}
	return strings.Join(sigs, " ")
}
