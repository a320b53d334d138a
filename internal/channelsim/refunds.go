package channelsim

import (
	"cmp"
	"encoding/json"
	"slices"
	"time"
)

// validate checks a refund request.
func (req RefundRequest) validate() error {
	if err := checkNo("out_refund_no", req.OutRefundNo); err != nil {
		return err
	}
	switch {
	case req.OutTradeNo != "" && req.TradeNo != "":
		return ErrInvalidRequest.withf("name the trade by out_trade_no or by trade_no, not both")
	case req.TradeNo != "":
		if err := checkNo("trade_no", req.TradeNo); err != nil {
			return err
		}
	default:
		if err := checkNo("out_trade_no", req.OutTradeNo); err != nil {
			return err
		}
	}
	if err := checkAmount("amount", req.Amount); err != nil {
		return err
	}
	if req.NotifyURL == "" {
		return nil
	}
	return checkNotifyURL("notify_url", req.NotifyURL)
}

// openRefund creates the refund of req, or returns the one with its out_refund_no; the same
// out_refund_no for another trade or amount is refund_mismatch. The refunds of a trade
// (processing or done) never exceed its amount: refund_exceeds.
func (s *Sim) openRefund(req RefundRequest) (Refund, error) {
	if err := req.validate(); err != nil {
		return Refund{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.TradeNo != "" {
		t, ok := s.tradeByNumberLocked(req.TradeNo)
		if !ok {
			return Refund{}, ErrTradeNotFound.withf("no trade has trade_no %q", req.TradeNo)
		}
		req.OutTradeNo = t.OutTradeNo
	}
	if r, ok := s.refunds[req.OutRefundNo]; ok {
		if r.OutTradeNo != req.OutTradeNo || r.Amount != req.Amount {
			return Refund{}, ErrRefundMismatch.withf("refund %s exists for trade %s and amount %d", r.OutRefundNo, r.OutTradeNo, r.Amount)
		}
		return r.Refund, nil
	}
	t, ok := s.trades[req.OutTradeNo]
	if !ok {
		return Refund{}, ErrTradeNotFound.withf("no trade has out_trade_no %q", req.OutTradeNo)
	}
	if t.Status != TradeSuccess {
		return Refund{}, ErrTradeNotPaid.withf("trade %s is %s", t.OutTradeNo, t.Status)
	}
	if refunded := s.refundedLocked(t.OutTradeNo); refunded+req.Amount > t.Amount {
		return Refund{}, ErrRefundExceeds.withf("trade %s of %d has %d refunded; %d more would exceed it", t.OutTradeNo, t.Amount, refunded, req.Amount)
	}
	now := s.now()
	r := &RefundRecord{
		Refund: Refund{
			RefundNo:    newNumber("R", now),
			OutRefundNo: req.OutRefundNo,
			OutTradeNo:  req.OutTradeNo,
			Status:      RefundProcessing,
			Amount:      req.Amount,
		},
		NotifyURL: req.NotifyURL,
		CreatedAt: now,
	}
	s.refunds[r.OutRefundNo] = r
	_ = s.saveLocked()
	s.log.Info("channel refund accepted", "out_refund_no", r.OutRefundNo, "refund_no", r.RefundNo, "out_trade_no", r.OutTradeNo, "amount", r.Amount)
	s.startSettlementLocked(r)
	return r.Refund, nil
}

// tradeByNumberLocked returns the trade whose channel number is tradeNo.
func (s *Sim) tradeByNumberLocked(tradeNo string) (*TradeRecord, bool) {
	for _, t := range s.trades {
		if t.TradeNo == tradeNo {
			return t, true
		}
	}
	return nil, false
}

// refundedLocked returns the sum of the refunds of a trade, processing or done.
func (s *Sim) refundedLocked(outTradeNo string) int64 {
	var sum int64
	for _, r := range s.refunds {
		if r.OutTradeNo == outTradeNo {
			sum += r.Amount
		}
	}
	return sum
}

// refund returns the refund with outRefundNo.
func (s *Sim) refund(outRefundNo string) (Refund, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.refunds[outRefundNo]
	if !ok {
		return Refund{}, ErrRefundNotFound.withf("no refund has out_refund_no %q", outRefundNo)
	}
	return r.Refund, nil
}

// startSettlementLocked makes r succeed RefundDelay after it was accepted.
func (s *Sim) startSettlementLocked(r *RefundRecord) {
	at, no := r.CreatedAt.Add(s.cfg.RefundDelay), r.OutRefundNo
	s.goLocked(func() {
		if s.sleepUntil(at) {
			s.settleRefund(no)
		}
	})
}

// settleRefund makes a processing refund SUCCESS and notifies its notify_url, if it has one.
func (s *Sim) settleRefund(outRefundNo string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.refunds[outRefundNo]
	if !ok || r.Status != RefundProcessing {
		return
	}
	now := s.now()
	r.Status, r.RefundedAt = RefundSuccess, &now
	var n *Notification
	if r.NotifyURL != "" {
		body, err := json.Marshal(RefundNotification{
			Channel:     s.cfg.Channel,
			RefundNo:    r.RefundNo,
			OutRefundNo: r.OutRefundNo,
			Amount:      r.Amount,
			Status:      RefundSuccess,
		})
		if err == nil {
			n = s.addNotificationLocked(KindRefund, r.OutTradeNo, r.OutRefundNo, r.NotifyURL, body)
		}
	}
	_ = s.saveLocked()
	s.log.Info("channel refund succeeded", "out_refund_no", r.OutRefundNo, "refund_no", r.RefundNo, "amount", r.Amount)
	if n != nil {
		s.startNotifierLocked(n.ID)
	}
}

// bill returns the trades paid and the refunds completed on the UTC day that starts at day,
// in the order they were paid or completed.
func (s *Sim) bill(day time.Time) Bill {
	end := day.AddDate(0, 0, 1)
	within := func(t *time.Time) bool { return t != nil && !t.Before(day) && t.Before(end) }
	trades, refunds, _ := func() ([]TradeRecord, []RefundRecord, []Notification) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.recordsLocked()
	}()
	b := Bill{Date: day.Format(time.DateOnly), Trades: []Trade{}, Refunds: []Refund{}}
	for _, t := range trades {
		if t.Status == TradeSuccess && within(t.PaidAt) {
			b.Trades = append(b.Trades, t.Trade)
		}
	}
	for _, r := range refunds {
		if r.Status == RefundSuccess && within(r.RefundedAt) {
			b.Refunds = append(b.Refunds, r.Refund)
		}
	}
	slices.SortFunc(b.Trades, func(x, y Trade) int {
		return cmp.Or(x.PaidAt.Compare(*y.PaidAt), cmp.Compare(x.OutTradeNo, y.OutTradeNo))
	})
	slices.SortFunc(b.Refunds, func(x, y Refund) int {
		return cmp.Or(x.RefundedAt.Compare(*y.RefundedAt), cmp.Compare(x.OutRefundNo, y.OutRefundNo))
	})
	return b
}
