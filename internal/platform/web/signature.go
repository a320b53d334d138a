package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/clock"
	"github.com/oncepay/oncepay/internal/platform/reportsig"
)

// HeaderSignature carries a signature: of a report a channel sends (reportsig's form), or of
// a request oncepay sends the channel (Sign's).
const HeaderSignature = reportsig.Header

// Sign returns the lowercase hex HMAC-SHA256 of body under secret: the X-Signature of the
// requests oncepay sends its payment channel (docs/contract.md, the channel's API).
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// RequireReportSignature lets through only requests whose X-Signature signs the raw body as
// a report of kind under secret, within tolerance of now (reportsig.Verify); others get 401
// invalid_signature. The real report routes check the signature in the inbound port
// (internal/notify), with the secret of the channel a report names; this middleware is for
// routes of one secret, such as the lab's replicas.
func RequireReportSignature(secret, kind string, tolerance time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := ReadBody(r)
			if err != nil {
				WriteError(w, r, err)
				return
			}
			if err := reportsig.Verify(secret, r.Header.Get(HeaderSignature), kind, body, clock.Now(), tolerance); err != nil {
				WriteError(w, r, apperr.ErrInvalidSignature.Withf("%v", err))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
