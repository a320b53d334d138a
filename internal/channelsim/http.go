package channelsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
)

// maxBody is the largest request body the simulator reads: 1 MiB.
const maxBody = 1 << 20

// maxHang bounds how long a timeout_after_apply answer waits for the caller to give up.
const maxHang = 60 * time.Second

// routes builds the simulator's router.
func (s *Sim) routes() http.Handler {
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) { writeError(w, ErrNotFound) })
	r.MethodNotAllowed(func(w http.ResponseWriter, _ *http.Request) { writeError(w, ErrMethodNotAllowed) })
	r.Route("/channel/v1", func(r chi.Router) {
		r.Use(s.requireSignature)
		r.Post("/trades", s.write(s.handleCreateTrade))
		r.Get("/trades/{out_trade_no}", s.read(s.handleGetTrade))
		r.Post("/trades/{out_trade_no}/close", s.write(s.handleCloseTrade))
		r.Post("/refunds", s.write(s.handleCreateRefund))
		r.Get("/refunds/{out_refund_no}", s.read(s.handleGetRefund))
		r.Get("/bills", s.read(s.handleGetBill))
	})
	r.Route("/sim", func(r chi.Router) {
		r.Post("/trades/{out_trade_no}/pay", s.read(s.handlePay))
		r.Post("/recharges", s.read(s.handleRecharge))
		r.Get("/trades/{out_trade_no}", s.read(s.handleSimTrade))
		r.Put("/faults", s.read(s.handlePutFaults))
		r.Get("/faults", s.read(func(*http.Request) (any, error) { return s.currentFaults(), nil }))
		r.Get("/state", s.read(func(*http.Request) (any, error) { return s.State(), nil }))
		r.Get("/cashier/{out_trade_no}", s.handleCashier)
	})
	return r
}

// handlerFunc is a handler that returns its answer: a value answered 200 as JSON, or an
// error answered as a problem.
type handlerFunc func(r *http.Request) (any, error)

// read serves h without faults.
func (s *Sim) read(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := h(r)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// write serves h, a call that changes the channel, with the faults in force: fail_before_apply
// answers 503 without calling h; timeout_after_apply calls h and answers only once the caller
// gave up.
func (s *Sim) write(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		faults := s.currentFaults()
		if rand.Float64() < faults.FailBeforeApply {
			s.log.Warn("channel call failed before apply (fault injection)", "method", r.Method, "path", r.URL.Path)
			writeError(w, ErrUnavailable)
			return
		}
		v, err := h(r)
		if rand.Float64() < faults.TimeoutAfterApply {
			s.log.Warn("channel call applied, answer held until the caller gives up (fault injection)", "method", r.Method, "path", r.URL.Path)
			s.hang(r)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

// hang waits until the caller goes away, the simulator closes or maxHang passes.
func (s *Sim) hang(r *http.Request) {
	timer := time.NewTimer(maxHang)
	defer timer.Stop()
	select {
	case <-r.Context().Done():
	case <-s.ctx.Done():
	case <-timer.C:
	}
}

// requireSignature lets through only requests whose X-Signature is the HMAC-SHA256 of their
// raw body (the empty body of a GET included); the body stays readable.
func (s *Sim) requireSignature(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				writeError(w, ErrPayloadTooLarge)
				return
			}
			writeError(w, ErrInvalidRequest.withf("the body could not be read"))
			return
		}
		if !Verify(s.cfg.Secret, body, r.Header.Get(HeaderSignature)) {
			writeError(w, ErrInvalidSignature)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// decodeJSON reads the body into v strictly: one JSON object, no unknown field.
func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return ErrInvalidRequest.withf("the body must be one JSON object")
	}
	return nil
}

// decodeError names what is wrong with a body without naming Go types.
func decodeError(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field != "" {
		return ErrInvalidRequest.withf("field %q has the wrong type", typeErr.Field)
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return ErrPayloadTooLarge
	}
	return ErrInvalidRequest.withf("the body is not a valid JSON object: %v", err)
}

// handleCreateTrade serves POST /channel/v1/trades.
func (s *Sim) handleCreateTrade(r *http.Request) (any, error) {
	var req TradeRequest
	if err := decodeJSON(r, &req); err != nil {
		return nil, err
	}
	return s.openTrade(req)
}

// handleGetTrade serves GET /channel/v1/trades/{out_trade_no}.
func (s *Sim) handleGetTrade(r *http.Request) (any, error) {
	t, err := s.tradeRecord(chi.URLParam(r, "out_trade_no"))
	if err != nil {
		return nil, err
	}
	return t.Trade, nil
}

// handleCloseTrade serves POST /channel/v1/trades/{out_trade_no}/close.
func (s *Sim) handleCloseTrade(r *http.Request) (any, error) {
	return s.closeTrade(chi.URLParam(r, "out_trade_no"))
}

// handleCreateRefund serves POST /channel/v1/refunds.
func (s *Sim) handleCreateRefund(r *http.Request) (any, error) {
	var req RefundRequest
	if err := decodeJSON(r, &req); err != nil {
		return nil, err
	}
	return s.openRefund(req)
}

// handleGetRefund serves GET /channel/v1/refunds/{out_refund_no}.
func (s *Sim) handleGetRefund(r *http.Request) (any, error) {
	return s.refund(chi.URLParam(r, "out_refund_no"))
}

// handleRecharge serves POST /sim/recharges {"out_trade_no","amount","notify_url"}: a buyer's
// recharge at the channel (Sim.Recharge).
func (s *Sim) handleRecharge(r *http.Request) (any, error) {
	var req TradeRequest
	if err := decodeJSON(r, &req); err != nil {
		return nil, err
	}
	return s.Recharge(req.OutTradeNo, req.Amount, req.NotifyURL)
}

// handleGetBill serves GET /channel/v1/bills?date=YYYY-MM-DD.
func (s *Sim) handleGetBill(r *http.Request) (any, error) {
	day, err := time.Parse(time.DateOnly, r.URL.Query().Get("date"))
	if err != nil {
		return nil, ErrInvalidRequest.withf("query parameter %q must be a date YYYY-MM-DD", "date")
	}
	return s.bill(day), nil
}

// handlePay serves POST /sim/trades/{out_trade_no}/pay. A browser's request from another
// site is refused (its Origin is not this host, or Sec-Fetch-Site says cross-site): a page
// elsewhere must not pay a trade in the buyer's name. Tools that send no Origin (curl, the
// drills) may pay.
func (s *Sim) handlePay(r *http.Request) (any, error) {
	if crossSite(r) {
		return nil, ErrCrossSite
	}
	return s.pay(chi.URLParam(r, "out_trade_no"))
}

// crossSite reports whether r came from a page of another origin than the simulator's.
func crossSite(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return true
	}
	o := r.Header.Get("Origin")
	return o != "" && o != "http://"+r.Host && o != "https://"+r.Host
}

// simTrade is the answer of GET /sim/trades/{out_trade_no}: a trade with its notifications,
// what the cashier page polls.
type simTrade struct {
	Trade         TradeRecord    `json:"trade"`
	Notifications []Notification `json:"notifications"`
}

// handleSimTrade serves GET /sim/trades/{out_trade_no}.
func (s *Sim) handleSimTrade(r *http.Request) (any, error) {
	outTradeNo := chi.URLParam(r, "out_trade_no")
	t, err := s.tradeRecord(outTradeNo)
	if err != nil {
		return nil, err
	}
	answer := simTrade{Trade: t, Notifications: []Notification{}}
	for _, n := range s.State().Notifications {
		if n.OutTradeNo == outTradeNo {
			answer.Notifications = append(answer.Notifications, n)
		}
	}
	return answer, nil
}

// handlePutFaults serves PUT /sim/faults; {} clears every fault.
func (s *Sim) handlePutFaults(r *http.Request) (any, error) {
	var f Faults
	if err := decodeJSON(r, &f); err != nil {
		return nil, err
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	s.SetFaults(f)
	return s.currentFaults(), nil
}
