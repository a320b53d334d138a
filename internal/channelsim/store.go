package channelsim

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// stateVersion is the version of the state file's layout.
const stateVersion = 1

// savedState is the layout of the state file. Faults are not saved: a restarted simulator
// starts with a healthy network.
type savedState struct {
	Version       int            `json:"version"`
	Seq           int64          `json:"seq"`
	Trades        []TradeRecord  `json:"trades"`
	Refunds       []RefundRecord `json:"refunds"`
	Notifications []Notification `json:"notifications"`
}

// loadState reads the state file; a missing file (or no file at all) is an empty state.
func loadState(path string) (savedState, error) {
	var st savedState
	if path == "" {
		return st, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("channelsim: read state: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("channelsim: state file %s is not valid: %w", path, err)
	}
	if st.Version != stateVersion {
		return st, fmt.Errorf("channelsim: state file %s has version %d, want %d", path, st.Version, stateVersion)
	}
	return st, nil
}

// restore puts a loaded state into the maps; the caller has set s.cfg. Bodies are compacted again, since an indented
// state file indents them: the signed bytes stay the compact JSON first sent.
func (s *Sim) restore(st savedState) {
	s.seq = st.Seq
	for i := range st.Trades {
		t := st.Trades[i]
		t.PayURL = s.payURL(t.OutTradeNo) // PublicURL may have changed since
		s.trades[t.OutTradeNo] = &t
	}
	for i := range st.Refunds {
		r := st.Refunds[i]
		s.refunds[r.OutRefundNo] = &r
	}
	for i := range st.Notifications {
		n := st.Notifications[i]
		var buf bytes.Buffer
		if json.Compact(&buf, n.Body) == nil {
			n.Body = buf.Bytes()
		}
		s.notes[n.ID] = &n
	}
}

// resumeLocked restarts the background work a saved state left under way.
func (s *Sim) resumeLocked() {
	for _, r := range s.refunds {
		if r.Status == RefundProcessing {
			s.startSettlementLocked(r)
		}
	}
	for _, n := range s.notes {
		if n.Status == NotificationPending {
			s.startNotifierLocked(n.ID)
		}
	}
}

// saveLocked writes the state file atomically (a temporary file renamed over it). The caller
// holds s.mu, so the file always follows the order of the changes.
func (s *Sim) saveLocked() error {
	if s.cfg.StateFile == "" {
		return nil
	}
	st := savedState{Version: stateVersion, Seq: s.seq}
	st.Trades, st.Refunds, st.Notifications = s.recordsLocked()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return s.saveFailed(err)
	}
	if err := writeFileAtomic(s.cfg.StateFile, b); err != nil {
		return s.saveFailed(err)
	}
	return nil
}

// saveFailed logs a failed save; the simulator goes on in memory.
func (s *Sim) saveFailed(err error) error {
	err = fmt.Errorf("channelsim: save state: %w", err)
	s.log.Error("channel simulator state not saved", "file", s.cfg.StateFile, "err", err)
	return err
}

// writeFileAtomic replaces path by b: readers see the old file or the new one, never a part.
func writeFileAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// recordsLocked returns copies of every trade, refund and notification, oldest first.
func (s *Sim) recordsLocked() ([]TradeRecord, []RefundRecord, []Notification) {
	trades := make([]TradeRecord, 0, len(s.trades))
	for _, t := range s.trades {
		trades = append(trades, *t)
	}
	slices.SortFunc(trades, func(a, b TradeRecord) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.OutTradeNo, b.OutTradeNo))
	})
	refunds := make([]RefundRecord, 0, len(s.refunds))
	for _, r := range s.refunds {
		refunds = append(refunds, *r)
	}
	slices.SortFunc(refunds, func(a, b RefundRecord) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.OutRefundNo, b.OutRefundNo))
	})
	notes := make([]Notification, 0, len(s.notes))
	for _, n := range s.notes {
		notes = append(notes, n.clone())
	}
	slices.SortFunc(notes, func(a, b Notification) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(len(a.ID), len(b.ID)), cmp.Compare(a.ID, b.ID))
	})
	return trades, refunds, notes
}

// clone returns a copy of n that shares no slice with it.
func (n *Notification) clone() Notification {
	c := *n
	c.Body = slices.Clone(n.Body)
	c.Attempts = slices.Clone(n.Attempts)
	if c.Attempts == nil {
		c.Attempts = []NotificationAttempt{}
	}
	return c
}

// State returns the faults in force and every trade, refund and notification attempt with its
// answer: what GET /sim/state answers.
func (s *Sim) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := State{Channel: s.cfg.Channel, Faults: s.faults}
	st.Trades, st.Refunds, st.Notifications = s.recordsLocked()
	return st
}
