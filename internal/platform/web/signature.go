package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/oncepay/oncepay/internal/platform/apperr"
)

// HeaderSignature carries a payment channel's signature of a notification body.
const HeaderSignature = "X-Signature"

// Sign returns the lowercase hex HMAC-SHA256 of body under secret, as channels send it.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// ValidSignature reports whether signature is the HMAC-SHA256 of body under secret in its one
// form, lowercase hex (CONTRACT.md), compared in constant time. An uppercase or padded
// spelling of the right MAC is refused like a wrong one: one form, as for channel names.
func ValidSignature(secret string, body []byte, signature string) bool {
	return hmac.Equal([]byte(signature), []byte(Sign(secret, body)))
}

// RequireSignature lets through only requests whose X-Signature is the HMAC-SHA256 of the raw
// body under secret (ValidSignature); others get 401 invalid_signature.
func RequireSignature(secret string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := ReadBody(r)
			if err != nil {
				WriteError(w, r, err)
				return
			}
			if !ValidSignature(secret, body, r.Header.Get(HeaderSignature)) {
				WriteError(w, r, apperr.ErrInvalidSignature)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
