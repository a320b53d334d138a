package payment

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/oncepay/oncepay/internal/idemhttp"
	"github.com/oncepay/oncepay/internal/idempotent"
)

// Settle applies a payment that oncepay learned by asking the channel (the close job,
// reconciliation) exactly as if the channel's notification had arrived: the same business key
// (channel + trade_no), the same fingerprint (POST /v1/payments/notify with the notification's
// body, canonical JSON) and the same work. Whichever comes first — the query or one of the
// notification's copies — applies it; the others replay its answer (I1, I9). applied reports
// whether this call moved the order to PAID.
func (s *Service) Settle(ctx context.Context, guard *idempotent.Guard, n Notification) (applied bool, err error) {
	body, err := json.Marshal(n)
	if err != nil {
		return false, err
	}
	req := idempotent.Request{
		Key: n.Key(), Fingerprint: idempotent.Fingerprint(http.MethodPost, Route, body),
		Via: "reconcile", Reject: idemhttp.StoredProblemAt(Route),
	}
	res, err := guard.Do(ctx, req, s.Work(n))
	if err != nil {
		return false, fmt.Errorf("settle %s trade %s: %w", n.Channel, n.TradeNo, err)
	}
	_, refused := res.Response.Header[idemhttp.HeaderOutcome]
	return res.Outcome == idempotent.Executed && res.Response.Status == http.StatusOK && !refused, nil
}
