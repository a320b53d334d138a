package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// The hostile pass of issue 27 on the receiver: what a forger tries against Verify.

// forge signs body as id at t with a raw HMAC key of the forger's choice.
func forge(key []byte, id string, t time.Time, body []byte) http.Header {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	return h
}

// TestEmptySecretNeverVerifies: a secret list with an empty or key-less entry — a trailing
// comma in WEBHOOK_SECRET="whsec_…,", or "whsec_" alone — must not turn into an HMAC with an
// empty key that anyone can compute: a forged delivery signed with the empty key is refused.
func TestEmptySecretNeverVerifies(t *testing.T) {
	body := paidEvent("5001", "O-50")
	for name, secrets := range map[string][]string{
		"a trailing comma": {secret, ""},
		"whsec_ alone":     {"whsec_"},
		"a blank entry":    {secret, " "},
	} {
		rc := &Receiver{Secrets: secrets, Tolerance: 5 * time.Minute}
		if id, err := rc.Verify(forge(nil, "5001", time.Now(), body), body, time.Now()); err == nil {
			t.Errorf("%s: a delivery forged with the empty key verified as %q", name, id)
		}
	}
	if _, err := New(databases(t)["sqlite"], []string{secret, ""}, time.Minute); err == nil {
		t.Error("New accepted a secret list with an empty entry")
	}
}

// TestReplayAndIDSwap: a genuine delivery replayed past the tolerance, a genuine signature
// moved to another webhook-id, and a genuine signature over the body with the body's event id
// changed are all refused; a timestamp spelled another way is the same signed second.
func TestReplayAndIDSwap(t *testing.T) {
	rc := &Receiver{Secrets: []string{secret}, Tolerance: 5 * time.Minute}
	body := paidEvent("6001", "O-60")
	at := time.Now()
	h := sign(at, body, secret)
	if _, err := rc.Verify(h, body, at.Add(5*time.Minute+2*time.Second)); err == nil {
		t.Error("the captured delivery replayed past the tolerance verified")
	}
	if _, err := rc.Verify(h, body, at.Add(-5*time.Minute-2*time.Second)); err == nil {
		t.Error("a delivery from the receiver's future verified")
	}
	swapped := h.Clone()
	swapped.Set("webhook-id", "6002")
	if _, err := rc.Verify(swapped, body, at); err == nil {
		t.Error("a signature for 6001 verified as 6002")
	}
	far := h.Clone()
	far.Set("webhook-timestamp", "9223372036854775807")
	if _, err := rc.Verify(far, body, at); err == nil {
		t.Error("a timestamp at the end of time verified")
	}
	if code := post(t, rc, paidEvent("6002", "O-60"), swapped); code != http.StatusBadRequest {
		t.Errorf("a body naming 6002 under 6001's signature: %d, want 400", code)
	}
}
