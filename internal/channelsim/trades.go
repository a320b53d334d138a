package channelsim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"time"
	"unicode/utf8"
)

// Limits of the requests the channel accepts.
const (
	maxAmount     = 10_000_000_000 // 10^10 cents, as in oncepay
	maxNoLen      = 64
	maxSubjectLen = 256
)

// validNo reports whether no is a merchant number: 1 to 64 ASCII letters, digits, '_', '.'
// or '-'.
func validNo(no string) bool {
	if len(no) == 0 || len(no) > maxNoLen {
		return false
	}
	for _, c := range []byte(no) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// checkNo returns nil or the invalid_request naming field.
func checkNo(field, no string) error {
	if validNo(no) {
		return nil
	}
	return ErrInvalidRequest.withf("field %q must be 1 to %d letters, digits, '_', '.' or '-'", field, maxNoLen)
}

// checkAmount returns nil or the invalid_request naming field.
func checkAmount(field string, amount int64) error {
	if amount >= 1 && amount <= maxAmount {
		return nil
	}
	return ErrInvalidRequest.withf("field %q must be an amount in cents between 1 and %d", field, int64(maxAmount))
}

// checkNotifyURL returns nil or the invalid_request naming field: an absolute http(s) URL.
func checkNotifyURL(field, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ErrInvalidRequest.withf("field %q must be an absolute http or https URL", field)
	}
	return nil
}

// validate checks a trade request.
func (req TradeRequest) validate() error {
	if err := checkNo("out_trade_no", req.OutTradeNo); err != nil {
		return err
	}
	if err := checkAmount("amount", req.Amount); err != nil {
		return err
	}
	if len(req.Subject) > maxSubjectLen || !utf8.ValidString(req.Subject) {
		return ErrInvalidRequest.withf("field %q must be valid UTF-8 of at most %d bytes", "subject", maxSubjectLen)
	}
	return checkNotifyURL("notify_url", req.NotifyURL)
}

// newNumber returns a channel number: the UTC date and 20 random digits, 28 digits in all
// like Alipay's. Random rather than sequential, so that a simulator started afresh does not
// reuse the numbers of a previous one that oncepay may remember.
func newNumber(prefix string, now time.Time) string {
	return fmt.Sprintf("%s%s%010d%010d", prefix, now.Format("20060102"), rand.Uint64N(1e10), rand.Uint64N(1e10))
}

// payURL returns the cashier page of a trade.
func (s *Sim) payURL(outTradeNo string) string {
	return s.cfg.PublicURL + "/sim/cashier/" + url.PathEscape(outTradeNo)
}

// openTrade creates the trade of req, or returns the one with its out_trade_no (in whatever
// status it is now); another amount is trade_mismatch.
func (s *Sim) openTrade(req TradeRequest) (Trade, error) {
	if err := req.validate(); err != nil {
		return Trade{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.openTradeLocked(req, KindTrade)
	if err != nil {
		return Trade{}, err
	}
	return t.Trade, nil
}

// openTradeLocked is openTrade of a validated req, whose notification is of kind; a trade that
// exists under its out_trade_no must have its amount and kind.
func (s *Sim) openTradeLocked(req TradeRequest, kind string) (*TradeRecord, error) {
	if t, ok := s.trades[req.OutTradeNo]; ok {
		if t.Amount != req.Amount {
			return nil, ErrTradeMismatch.withf("trade %s exists with amount %d, not %d", req.OutTradeNo, t.Amount, req.Amount)
		}
		if t.kind() != kind {
			return nil, ErrTradeMismatch.withf("trade %s exists as a %s, not a %s", req.OutTradeNo, t.kind(), kind)
		}
		return t, nil
	}
	now := s.now()
	t := &TradeRecord{
		Trade: Trade{
			TradeNo:    newNumber("", now),
			OutTradeNo: req.OutTradeNo,
			Status:     TradeWaitBuyerPay,
			Amount:     req.Amount,
			PayURL:     s.payURL(req.OutTradeNo),
		},
		Kind:      kind,
		Subject:   req.Subject,
		NotifyURL: req.NotifyURL,
		ExpiresAt: req.ExpiresAt,
		CreatedAt: now,
	}
	s.trades[t.OutTradeNo] = t
	_ = s.saveLocked()
	s.log.Info("channel trade opened", "kind", kind, "out_trade_no", t.OutTradeNo, "trade_no", t.TradeNo, "amount", t.Amount)
	return t, nil
}

// tradeRecord returns a copy of the trade with outTradeNo.
func (s *Sim) tradeRecord(outTradeNo string) (TradeRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.trades[outTradeNo]
	if !ok {
		return TradeRecord{}, ErrTradeNotFound.withf("no trade has out_trade_no %q", outTradeNo)
	}
	return *t, nil
}

// closeTrade closes an unpaid trade; closing a closed one again changes nothing, a paid one
// is trade_paid.
func (s *Sim) closeTrade(outTradeNo string) (Trade, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.trades[outTradeNo]
	if !ok {
		return Trade{}, ErrTradeNotFound.withf("no trade has out_trade_no %q", outTradeNo)
	}
	switch t.Status {
	case TradeSuccess:
		return Trade{}, ErrTradePaid.withf("trade %s was paid at %s", outTradeNo, t.PaidAt.Format(time.RFC3339Nano))
	case TradeWaitBuyerPay:
		now := s.now()
		t.Status, t.ClosedAt = TradeClosed, &now
		_ = s.saveLocked()
		s.log.Info("channel trade closed", "out_trade_no", outTradeNo, "trade_no", t.TradeNo)
	}
	return t.Trade, nil
}

// Pay is the buyer paying the trade with outTradeNo (what POST /sim/trades/{out_trade_no}/pay
// does): the trade becomes SUCCESS and its notification is sent to notify_url at once, then
// on the schedule until acknowledged. Paying a paid trade again changes nothing; a closed
// trade cannot be paid (ErrTradeClosed), an unknown one is ErrTradeNotFound.
func (s *Sim) Pay(outTradeNo string) error {
	_, err := s.pay(outTradeNo)
	return err
}

// Recharge is a buyer topping up a merchant's account at the channel (what POST /sim/recharges
// does): a trade of amount under outTradeNo, the merchant's recharge id, is opened and paid at
// once, and its notification, signed as kind "recharge", goes to notifyURL like a payment's.
// The trade is on the bill of the day, so that reconciliation finds the recharge oncepay
// credits. Recharging the same outTradeNo again answers the same trade; another amount, or an
// out_trade_no of a merchant's trade, is ErrTradeMismatch.
func (s *Sim) Recharge(outTradeNo string, amount int64, notifyURL string) (Trade, error) {
	req := TradeRequest{OutTradeNo: outTradeNo, Amount: amount, Subject: "recharge", NotifyURL: notifyURL}
	if err := req.validate(); err != nil {
		return Trade{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.openTradeLocked(req, KindRecharge); err != nil {
		return Trade{}, err
	}
	return s.payLocked(outTradeNo)
}

// pay is Pay answering the trade.
func (s *Sim) pay(outTradeNo string) (Trade, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.payLocked(outTradeNo)
}

// payLocked is pay with s.mu held.
func (s *Sim) payLocked(outTradeNo string) (Trade, error) {
	t, ok := s.trades[outTradeNo]
	if !ok {
		return Trade{}, ErrTradeNotFound.withf("no trade has out_trade_no %q", outTradeNo)
	}
	switch t.Status {
	case TradeClosed:
		return Trade{}, ErrTradeClosed.withf("trade %s is closed and cannot be paid", outTradeNo)
	case TradeSuccess:
		return t.Trade, nil
	}
	now := s.now()
	t.Status, t.PaidAt = TradeSuccess, &now
	body, err := json.Marshal(TradeNotification{
		Channel:    s.cfg.Channel,
		TradeNo:    t.TradeNo,
		OutTradeNo: t.OutTradeNo,
		Amount:     t.Amount,
		Status:     TradeSuccess,
	})
	if err != nil {
		return Trade{}, err
	}
	n := s.addNotificationLocked(t.kind(), t.OutTradeNo, "", t.NotifyURL, body)
	_ = s.saveLocked()
	s.log.Info("channel trade paid", "out_trade_no", outTradeNo, "trade_no", t.TradeNo, "amount", t.Amount)
	s.startNotifierLocked(n.ID)
	return t.Trade, nil
}
