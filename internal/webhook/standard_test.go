package webhook_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/platform/ids"
	"github.com/oncepay/oncepay/internal/webhook"
)

// The published test vector of the Standard Webhooks libraries (libraries/go/webhook_test.go,
// TestWebhookSign, and the same in every other language's tests).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorPayload   = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// TestSignStandardVector: oncepay's signer gives the specification's published signature,
// and one v1 per secret, space-separated, during a rotation.
func TestSignStandardVector(t *testing.T) {
	got := webhook.SignStandard([]string{vectorSecret}, vectorID, time.Unix(vectorTimestamp, 0), []byte(vectorPayload))
	if got != vectorSignature {
		t.Errorf("signature %q, want the published %q", got, vectorSignature)
	}
	two := webhook.SignStandard([]string{"whsec_" + base64.StdEncoding.EncodeToString([]byte("another secret of 24 bytes")), vectorSecret},
		vectorID, time.Unix(vectorTimestamp, 0), []byte(vectorPayload))
	if sigs := strings.Split(two, " "); len(sigs) != 2 || sigs[1] != vectorSignature || !strings.HasPrefix(sigs[0], "v1,") {
		t.Errorf("rotation signature %q, want two space-separated v1 signatures, the second the published one", two)
	}
	if got := webhook.SignStandard([]string{vectorSecret}, vectorID+"x", time.Unix(vectorTimestamp, 0), []byte(vectorPayload)); got == vectorSignature {
		t.Error("the message id is not inside the MAC")
	}
}

// TestAttemptCarriesStandardHeaders: every attempt carries webhook-id (the event id),
// webhook-timestamp and webhook-signature over "<id>.<timestamp>.<body>" with the endpoint's
// whsec_ base64 secret, beside the legacy Oncepay-Signature.
func TestAttemptCarriesStandardHeaders(t *testing.T) {
	f := newFixture(t)
	rcv := newReceiver(t, nil)
	e := f.endpoint(t, rcv.srv.URL, outbox.OrderPaid)
	if key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(e.Secret, "whsec_")); err != nil || len(key) != 32 {
		t.Errorf("secret %q: want whsec_ and 32 bytes in base64 (%v)", e.Secret, err)
	}
	id := f.announce(t, outbox.OrderPaid, map[string]string{"order_id": "1"})
	f.sequence(t)
	if n, err := f.sender(f.db, time.Hour).RunOnce(context.Background()); n != 1 || err != nil {
		t.Fatalf("sent %d (%v)", n, err)
	}
	h := rcv.got()[0]
	if h.webhookID != ids.Format(id) {
		t.Errorf("webhook-id %q, want the event id %d", h.webhookID, id)
	}
	want := webhook.SignStandard([]string{e.Secret}, h.webhookID, unix(t, h.webhookTimestamp), h.body)
	if h.webhookSignature != want || !strings.HasPrefix(want, "v1,") {
		t.Errorf("webhook-signature %q, want %q", h.webhookSignature, want)
	}
	if !verify(h.signature, h.body, e.Secret) {
		t.Errorf("the legacy Oncepay-Signature %q no longer verifies", h.signature)
	}
}
