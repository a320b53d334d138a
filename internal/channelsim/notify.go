package channelsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/oncepay/oncepay/internal/platform/reportsig"
)

// Limits of what the simulator reads and keeps of an answer to a notification.
const (
	maxAnswerRead = 64 << 10
	maxAnswerKept = 512
)

// addNotificationLocked records a new pending notification, due at once.
func (s *Sim) addNotificationLocked(kind, outTradeNo, outRefundNo, url string, body []byte) *Notification {
	s.seq++
	now := s.now()
	n := &Notification{
		ID:          "n" + strconv.FormatInt(s.seq, 10),
		Kind:        kind,
		OutTradeNo:  outTradeNo,
		OutRefundNo: outRefundNo,
		URL:         url,
		Body:        body,
		Status:      NotificationPending,
		NextAt:      &now,
		CreatedAt:   now,
		Attempts:    []NotificationAttempt{},
	}
	s.notes[n.ID] = n
	return n
}

// startNotifierLocked delivers the notification id in the background until it is
// acknowledged, the schedule runs out or the simulator closes.
func (s *Sim) startNotifierLocked(id string) {
	s.goLocked(func() { s.notify(id) })
}

// notify is the loop of one notification: wait for the next round, send it, record it.
func (s *Sim) notify(id string) {
	for {
		n, ok := s.pendingNotification(id)
		if !ok || !s.sleepUntil(*n.NextAt) {
			return
		}
		faults := s.currentFaults()
		if !s.sleep(time.Duration(faults.NotifyDelay)) {
			return
		}
		attempts := s.deliver(n, faults)
		if s.ctx.Err() != nil {
			return // interrupted by Close: the round is not recorded and runs again after a restart
		}
		s.recordRound(id, attempts)
	}
}

// pendingNotification returns a copy of the notification id if it still waits for a round.
func (s *Sim) pendingNotification(id string) (Notification, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.notes[id]
	if !ok || n.Status != NotificationPending || n.NextAt == nil {
		return Notification{}, false
	}
	return n.clone(), true
}

// deliver sends one round of n: the notification and the extra copies the faults ask for, all
// at once; each copy may be dropped.
func (s *Sim) deliver(n Notification, faults Faults) []NotificationAttempt {
	attempts := make([]NotificationAttempt, 1+faults.DuplicateNotifications)
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Go(func() {
			attempts[i] = s.send(n, i, faults)
		})
	}
	wg.Wait()
	return attempts
}

// send sends one copy of n, unless the drop fault loses it, and reads the answer.
func (s *Sim) send(n Notification, copyNo int, faults Faults) NotificationAttempt {
	a := NotificationAttempt{Round: n.Rounds, Copy: copyNo, At: s.now()}
	if rand.Float64() < faults.DropNotifications {
		a.Dropped, a.Error = true, "dropped by fault injection"
		return a
	}
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, n.URL, bytes.NewReader(n.Body))
	if err != nil {
		a.Error = err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	// Every attempt is signed afresh, with the real clock (the receiver's tolerance is about
	// wall time) and the report's kind, so that a captured copy expires (I13).
	req.Header.Set(HeaderSignature, reportsig.Sign(s.cfg.Secret, time.Now(), n.Kind, n.Body))
	req.Header.Set("X-Request-Id", fmt.Sprintf("%s-%s-r%d-c%d", s.cfg.Channel, n.ID, n.Rounds, copyNo))
	res, err := s.cfg.Client.Do(req)
	if err != nil {
		a.Error = err.Error()
		return a
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(res.Body, maxAnswerRead))
	a.Status = res.StatusCode
	a.Answer = truncate(string(answer), maxAnswerKept)
	a.Success = res.StatusCode == http.StatusOK && acknowledged(answer)
	return a
}

// acknowledged reports whether an answer body is {"result":"success"}.
func acknowledged(answer []byte) bool {
	var ack struct {
		Result string `json:"result"`
	}
	return json.Unmarshal(answer, &ack) == nil && ack.Result == "success"
}

// truncate returns at most n bytes of s.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// recordRound stores the attempts of a round and decides what follows: done when a copy was
// acknowledged, the next retry of the schedule otherwise, or giving up when it ran out.
func (s *Sim) recordRound(id string, attempts []NotificationAttempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.notes[id]
	if !ok {
		return
	}
	n.Attempts = append(n.Attempts, attempts...)
	round := n.Rounds
	n.Rounds++
	success := false
	for _, a := range attempts {
		success = success || a.Success
		s.log.Info("channel notification attempt", "id", id, "kind", n.Kind, "out_trade_no", n.OutTradeNo,
			"out_refund_no", n.OutRefundNo, "url", n.URL, "round", a.Round, "copy", a.Copy,
			"dropped", a.Dropped, "status", a.Status, "error", a.Error, "success", a.Success)
	}
	switch {
	case success:
		n.Status, n.NextAt = NotificationDelivered, nil
	case round < len(s.cfg.Schedule):
		next := s.now().Add(s.cfg.Schedule[round])
		n.NextAt = &next
	default:
		n.Status, n.NextAt = NotificationGaveUp, nil
		s.log.Warn("channel notification given up", "id", id, "url", n.URL, "rounds", n.Rounds)
	}
	_ = s.saveLocked()
}
