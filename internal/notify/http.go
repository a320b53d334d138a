package notify

import (
	"encoding/json"
	"errors"
	"net/http"

	idem "github.com/oncepay/oncepay/internal/idempotent"
	"github.com/oncepay/oncepay/internal/platform/apperr"
	"github.com/oncepay/oncepay/internal/platform/reportsig"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Handler serves the HTTP route of kind's reports (Routes). It reads, top to bottom, what
// every report goes through before its key is claimed, so that a refused copy stores nothing
// and the channel's correct copy still applies:
//
//  1. the body, within the body limit (413);
//  2. the channel it names, which must be configured (400 unknown_channel) — its secret is the
//     one that signed the report;
//  3. the signature over timestamp, kind and body, the timestamp within
//     ONCEPAY_SIGNATURE_TOLERANCE (401 invalid_signature);
//  4. the report parsed and validated completely (400 invalid_request);
//
// then the report is applied once through the guard (deliver) and answered through the kit's
// HTTP adapter with oncepay's settings (idem.HTTP): its problems, its Retry-After.
func (p *Port) Handler(kind Kind) http.HandlerFunc {
	answer := idem.HTTP(p.cfg.Guard)
	return func(w http.ResponseWriter, req *http.Request) {
		body, err := web.ReadBody(req)
		if err != nil {
			answer.Reject(w, req, err)
			return
		}
		secret, err := p.secretFor(body)
		if err != nil {
			answer.Reject(w, req, err)
			return
		}
		if sigs := req.Header.Values(reportsig.Header); len(sigs) > 1 {
			answer.Reject(w, req, apperr.ErrInvalidSignature.Withf("send one X-Signature header, not %d", len(sigs)))
			return
		}
		if err := reportsig.Verify(secret, req.Header.Get(reportsig.Header), string(kind), body, p.cfg.Now(), p.cfg.Tolerance); err != nil {
			answer.Reject(w, req, signatureError(err))
			return
		}
		r, err := Parse(kind, body)
		if err != nil {
			answer.Reject(w, req, err)
			return
		}
		res, _, err := p.deliver(req.Context(), r, "http", p.cfg.Guard.Do)
		answer.Write(w, req, res, err)
	}
}

// secretFor returns the secret of the channel body names: the channel is read before the
// signature is checked, since each channel signs with its own secret. A body that is not a
// JSON object with a channel in canonical form is invalid_request; a channel that is not
// configured is unknown_channel. Whatever this lenient read picks, the strict parse after
// the signature either refuses the body or agrees with it (it refuses duplicate and
// case-folded names).
func (p *Port) secretFor(body []byte) (string, error) {
	var peek struct {
		Channel string `json:"channel"`
	}
	if err := json.Unmarshal(body, &peek); err != nil {
		return "", apperr.ErrInvalidRequest.Withf("invalid JSON body: a report is a JSON object")
	}
	if err := web.CheckChannel("channel", peek.Channel); err != nil {
		return "", err
	}
	secret, ok := p.cfg.Secrets[peek.Channel]
	if !ok {
		return "", ErrUnknownChannel.Withf("channel %q is not one of ONCEPAY_CHANNELS", peek.Channel)
	}
	return secret, nil
}

// signatureError is the client-facing error of a refused signature.
func signatureError(err error) error {
	switch {
	case errors.Is(err, reportsig.ErrStale):
		return apperr.ErrInvalidSignature.Withf("X-Signature's timestamp t is too far from the server's clock (ONCEPAY_SIGNATURE_TOLERANCE): sign every attempt afresh")
	case errors.Is(err, reportsig.ErrMalformed):
		return apperr.ErrInvalidSignature.Withf("%s", reportsig.ErrMalformed.Error())
	}
	return apperr.ErrInvalidSignature.Withf("X-Signature does not match the body, this kind of report and t")
}
