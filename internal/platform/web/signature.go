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

// RequireSignature lets through only requests whose X-Signature is the HMAC-SHA256 of the raw
// body under secret, compared in constant time; others get 401 invalid_signature.
func RequireSignature(secret string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := ReadBody(r)
			if err != nil {
				WriteError(w, r, err)
				return
			}
			got, err := hex.DecodeString(r.Header.Get(HeaderSignature))
			want, _ := hex.DecodeString(Sign(secret, body))
			if err != nil || !hmac.Equal(got, want) {
				WriteError(w, r, apperr.ErrInvalidSignature)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
