// Package channel is oncepay's client of the payment channel (docs/contract.md, "The payment
// channel (outbound)"): it opens, queries and closes trades, refunds them and fetches the
// daily bill. Every request is signed (X-Signature: hex HMAC-SHA256 of the raw body), every
// attempt has its own timeout, and failed attempts are retried a bounded number of times with
// exponential backoff and jitter (github.com/sethvargo/go-retry).
//
// The rule this package exists for (I8): a timeout or a 5xx is indefinite. The channel may
// well have applied the call and only its answer was lost, so the caller must not conclude
// "it failed" and must never try again under a new number. The client enforces its half of
// the rule in code: a request body is encoded once, before the first attempt, and every retry
// sends those same bytes — the same out_trade_no or out_refund_no — so that the channel, which
// is idempotent by those numbers, applies the call once. When the retries run out the error
// wraps ErrIndefinite; the caller keeps its recovery point (a PENDING row) and retries later
// with the same number, or queries. The client never invents a number: the caller owns them.
//
// A 4xx answer is final and never retried; the contract's codes map to sentinel errors
// (ErrTradePaid, ErrTradeMismatch, ErrRefundExceeds, ErrNotFound), others to ErrRejected.
package channel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/oncepay/oncepay/internal/platform/requestid"
	"github.com/oncepay/oncepay/internal/platform/web"
)

// Errors of the channel. A 4xx is final: the same call will get the same answer.
var (
	// ErrIndefinite is a call whose outcome is unknown: every attempt timed out, failed on
	// the network or got a 5xx. It may have been applied (I8): retry with the same number,
	// or query; never a new number.
	ErrIndefinite = errors.New("channel: outcome unknown (timeout or 5xx); retry with the same number or query")
	// ErrTradePaid is a close refused because the trade is already paid (409 trade_paid).
	ErrTradePaid = errors.New("channel: the trade is already paid")
	// ErrTradeMismatch is an out_trade_no already opened with another amount (409 trade_mismatch).
	ErrTradeMismatch = errors.New("channel: the out_trade_no exists with another amount")
	// ErrRefundExceeds is a refund beyond what is left of the trade (409 refund_exceeds).
	ErrRefundExceeds = errors.New("channel: the refunds would exceed the trade's amount")
	// ErrNotFound is an unknown trade or refund (404 trade_not_found / refund_not_found).
	ErrNotFound = errors.New("channel: no such trade or refund")
	// ErrRejected is any other 4xx answer.
	ErrRejected = errors.New("channel: request rejected")
)

// Statuses the channel reports.
const (
	TradeWaitBuyerPay = "WAIT_BUYER_PAY"
	TradeSuccess      = "SUCCESS"
	TradeClosed       = "CLOSED"
	RefundProcessing  = "PROCESSING"
	RefundSuccess     = "SUCCESS"
)

// Config configures a Client.
type Config struct {
	// BaseURL is the channel's base URL, such as http://127.0.0.1:18090.
	BaseURL string
	// Secret signs every request body: the channel's own secret (ONCEPAY_CHANNEL_SECRET_<NAME>,
	// or ONCEPAY_CHANNEL_SECRET).
	Secret string
	// Timeout bounds each attempt; default 5s.
	Timeout time.Duration
	// Retries is how many times an indefinite attempt is retried; default 3.
	Retries uint64
	// Backoff is the first pause between attempts, doubled each time, with jitter; default 100ms.
	Backoff time.Duration
	// HTTP is the client to use; default a fresh http.Client.
	HTTP *http.Client
}

// Client calls the channel. It is safe for concurrent use.
type Client struct {
	cfg Config
}

// New returns a client for cfg.
func New(cfg Config) *Client {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 100 * time.Millisecond
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{}
	}
	cfg.BaseURL = strings.TrimRight(cfg.BaseURL, "/")
	return &Client{cfg: cfg}
}

// CallBound is the longest one call can last: every attempt timing out, with the longest
// pauses between them. A call begun longer ago than this has ended, whatever its outcome.
func (c *Client) CallBound() time.Duration {
	attempts := time.Duration(c.cfg.Retries + 1)
	pauses := c.cfg.Backoff * time.Duration(uint64(1)<<min(c.cfg.Retries, 16)) * 12 / 10
	return attempts*c.cfg.Timeout + pauses
}

// TradeRequest opens a trade. OutTradeNo is oncepay's number (the order id).
type TradeRequest struct {
	OutTradeNo string    `json:"out_trade_no"`
	Amount     int64     `json:"amount"`
	Subject    string    `json:"subject"`
	NotifyURL  string    `json:"notify_url"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// Trade is the channel's view of a trade.
type Trade struct {
	TradeNo    string     `json:"trade_no"`
	OutTradeNo string     `json:"out_trade_no"`
	Status     string     `json:"status"`
	Amount     int64      `json:"amount"`
	PayURL     string     `json:"pay_url,omitempty"`
	PaidAt     *time.Time `json:"paid_at,omitempty"`
}

// RefundRequest refunds part or all of a trade. OutRefundNo is oncepay's number, committed
// before the call (I8). The trade is named by exactly one of OutTradeNo (oncepay's number,
// the order id) and TradeNo (the channel's own): Alipay and WeChat refund by either, and the
// channel's number names a second trade of one order on its own.
type RefundRequest struct {
	OutRefundNo string `json:"out_refund_no"`
	OutTradeNo  string `json:"out_trade_no,omitempty"`
	TradeNo     string `json:"trade_no,omitempty"`
	Amount      int64  `json:"amount"`
	NotifyURL   string `json:"notify_url"`
}

// Refund is the channel's view of a refund.
type Refund struct {
	RefundNo    string `json:"refund_no"`
	OutRefundNo string `json:"out_refund_no"`
	OutTradeNo  string `json:"out_trade_no,omitempty"`
	Status      string `json:"status"`
	Amount      int64  `json:"amount"`
}

// Bill is what the channel settled on one day (UTC).
type Bill struct {
	Trades  []Trade  `json:"trades"`
	Refunds []Refund `json:"refunds"`
}

// CreateTrade opens the trade req.OutTradeNo, or returns it when it is already open.
func (c *Client) CreateTrade(ctx context.Context, req TradeRequest) (Trade, error) {
	var t Trade
	return t, c.call(ctx, http.MethodPost, "/channel/v1/trades", req, &t)
}

// QueryTrade returns the trade outTradeNo.
func (c *Client) QueryTrade(ctx context.Context, outTradeNo string) (Trade, error) {
	var t Trade
	return t, c.call(ctx, http.MethodGet, "/channel/v1/trades/"+url.PathEscape(outTradeNo), nil, &t)
}

// CloseTrade closes the trade outTradeNo; a paid trade is ErrTradePaid (I9).
func (c *Client) CloseTrade(ctx context.Context, outTradeNo string) (Trade, error) {
	var t Trade
	return t, c.call(ctx, http.MethodPost, "/channel/v1/trades/"+url.PathEscape(outTradeNo)+"/close", nil, &t)
}

// Refund asks the channel to refund req. It is idempotent by req.OutRefundNo at the channel:
// after an indefinite answer, call it again with the same req (I8).
func (c *Client) Refund(ctx context.Context, req RefundRequest) (Refund, error) {
	var r Refund
	return r, c.call(ctx, http.MethodPost, "/channel/v1/refunds", req, &r)
}

// QueryRefund returns the refund outRefundNo.
func (c *Client) QueryRefund(ctx context.Context, outRefundNo string) (Refund, error) {
	var r Refund
	return r, c.call(ctx, http.MethodGet, "/channel/v1/refunds/"+url.PathEscape(outRefundNo), nil, &r)
}

// Bill returns what the channel settled on date (YYYY-MM-DD, UTC).
func (c *Client) Bill(ctx context.Context, date string) (Bill, error) {
	var b Bill
	return b, c.call(ctx, http.MethodGet, "/channel/v1/bills?date="+url.QueryEscape(date), nil, &b)
}

// apiError is the channel's error body; it may be a problem document or a bare code.
type apiError struct {
	Code   string `json:"code"`
	Error  string `json:"error"`
	Detail string `json:"detail"`
}

// call sends one request, retrying indefinite attempts with the same bytes, and decodes the
// 2xx answer into out.
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("channel: encode %s %s: %w", method, path, err)
		}
	}
	// The body is fixed here, once: every attempt below sends exactly these bytes (I8).
	backoff := retry.WithMaxRetries(c.cfg.Retries, retry.WithJitterPercent(20, retry.NewExponential(c.cfg.Backoff)))
	var last error
	err := retry.Do(ctx, backoff, func(ctx context.Context) error {
		last = c.attempt(ctx, method, path, body, out)
		if errors.Is(last, ErrIndefinite) {
			return retry.RetryableError(last)
		}
		return last
	})
	switch {
	case err == nil:
		return nil
	case last != nil && !errors.Is(last, ErrIndefinite):
		return last // a 4xx: final
	case errors.Is(err, ErrIndefinite):
		return err
	default: // the caller's context ended between attempts: still unknown
		return fmt.Errorf("%w: %s %s: %w", ErrIndefinite, method, path, err)
	}
}

// attempt is one signed request with its own timeout. A timeout, a network error and a 5xx
// are ErrIndefinite; a 4xx is its sentinel.
func (c *Client) attempt(ctx context.Context, method, path string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.cfg.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("channel: %s %s: %w", method, path, err)
	}
	req.Header.Set(web.HeaderSignature, web.Sign(c.cfg.Secret, body))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if id := requestid.From(ctx); id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	res, err := c.cfg.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %w", ErrIndefinite, method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	switch {
	case err != nil:
		return fmt.Errorf("%w: %s %s: reading the answer: %w", ErrIndefinite, method, path, err)
	case res.StatusCode >= 500:
		return fmt.Errorf("%w: %s %s answered %d %s", ErrIndefinite, method, path, res.StatusCode, bytes.TrimSpace(raw))
	case res.StatusCode >= 400:
		return final(method, path, res.StatusCode, raw)
	case res.StatusCode < 200 || res.StatusCode > 299:
		return fmt.Errorf("%w: %s %s answered %d", ErrIndefinite, method, path, res.StatusCode)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%w: %s %s: undecodable answer: %w", ErrIndefinite, method, path, err)
	}
	return nil
}

// final maps a 4xx answer to its sentinel error.
func final(method, path string, status int, raw []byte) error {
	var e apiError
	_ = json.Unmarshal(raw, &e)
	code := e.Code
	if code == "" {
		code = e.Error
	}
	sentinel := ErrRejected
	switch {
	case code == "trade_paid":
		sentinel = ErrTradePaid
	case code == "trade_mismatch":
		sentinel = ErrTradeMismatch
	case code == "refund_exceeds":
		sentinel = ErrRefundExceeds
	case status == http.StatusNotFound, code == "trade_not_found", code == "refund_not_found":
		sentinel = ErrNotFound
	}
	return fmt.Errorf("%w: %s %s answered %d %s", sentinel, method, path, status, bytes.TrimSpace(raw))
}
