package channelsim

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// HeaderSignature carries the signature of a request or notification body.
const HeaderSignature = "X-Signature"

// Sign returns the lowercase hex HMAC-SHA256 of body with secret: the X-Signature of body.
func Sign(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// Verify reports whether signature is the X-Signature of body with secret. It compares in
// constant time, and accepts the hex digits in either case.
func Verify(secret string, body []byte, signature string) bool {
	got, err := hex.DecodeString(signature)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}
