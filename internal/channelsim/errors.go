package channelsim

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Error is an answer of the channel other than success: an HTTP status, a stable code and a
// detail. Errors compare by code with errors.Is, so errors.Is(err, ErrTradeNotFound) holds
// for every trade_not_found whatever its detail.
type Error struct {
	Status int
	Code   string
	Detail string
}

// The channel's errors.
var (
	ErrInvalidRequest   = &Error{http.StatusBadRequest, "invalid_request", "the request is malformed"}
	ErrInvalidSignature = &Error{http.StatusUnauthorized, "invalid_signature", "X-Signature is not the HMAC-SHA256 of the body"}
	ErrNotFound         = &Error{http.StatusNotFound, "not_found", "no such resource"}
	ErrTradeNotFound    = &Error{http.StatusNotFound, "trade_not_found", "no trade has this out_trade_no"}
	ErrRefundNotFound   = &Error{http.StatusNotFound, "refund_not_found", "no refund has this out_refund_no"}
	ErrMethodNotAllowed = &Error{http.StatusMethodNotAllowed, "method_not_allowed", "the method is not allowed here"}
	ErrTradeMismatch    = &Error{http.StatusConflict, "trade_mismatch", "a trade with this out_trade_no exists with another amount"}
	ErrTradePaid        = &Error{http.StatusConflict, "trade_paid", "the trade is paid"}
	ErrTradeClosed      = &Error{http.StatusConflict, "trade_closed", "the trade is closed"}
	ErrTradeNotPaid     = &Error{http.StatusConflict, "trade_not_paid", "the trade is not paid"}
	ErrRefundMismatch   = &Error{http.StatusConflict, "refund_mismatch", "a refund with this out_refund_no exists for another trade or amount"}
	ErrRefundExceeds    = &Error{http.StatusConflict, "refund_exceeds", "the refunds of the trade would exceed its amount"}
	ErrPayloadTooLarge  = &Error{http.StatusRequestEntityTooLarge, "payload_too_large", "the body is larger than 1 MiB"}
	ErrUnavailable      = &Error{http.StatusServiceUnavailable, "unavailable", "the channel is unavailable (fault injection)"}
	ErrCrossSite        = &Error{http.StatusForbidden, "cross_site", "the pay action must come from the cashier page itself"}
)

// Error returns the code and the detail.
func (e *Error) Error() string { return e.Code + ": " + e.Detail }

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// withf returns a copy of e with another detail.
func (e *Error) withf(format string, args ...any) *Error {
	c := *e
	c.Detail = fmt.Sprintf(format, args...)
	return &c
}

// problem is the RFC 9457 document an error is answered with.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail,omitempty"`
}

// writeError answers err as application/problem+json. Errors that are not *Error are 500s.
func writeError(w http.ResponseWriter, err error) {
	e, ok := err.(*Error)
	if !ok {
		e = &Error{http.StatusInternalServerError, "internal", "internal error"}
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(problem{
		Type:   "https://oncepay.dev/problems/" + e.Code,
		Title:  http.StatusText(e.Status),
		Status: e.Status,
		Code:   e.Code,
		Detail: e.Detail,
	})
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
