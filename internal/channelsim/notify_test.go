package channelsim

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/platform/reportsig"
)

// checkTradeNotification requires that d is the signed notification of trade tr.
func checkTradeNotification(t *testing.T, d received, tr Trade) {
	t.Helper()
	if err := reportsig.Verify(testSecret, d.Signature, KindTrade, d.Body, time.Now(), time.Minute); err != nil {
		t.Errorf("signature %q does not sign %s as a fresh trade report: %v", d.Signature, d.Body, err)
	}
	want, _ := json.Marshal(TradeNotification{Channel: DefaultChannel, TradeNo: tr.TradeNo, OutTradeNo: tr.OutTradeNo, Amount: tr.Amount, Status: TradeSuccess})
	if string(d.Body) != string(want) {
		t.Errorf("notification body = %s, want %s", d.Body, want)
	}
}

func TestPayNotifiesAndRetriesUntilAcknowledged(t *testing.T) {
	rcv := newReceiver(t, failing(2))
	e := newEnv(t, testConfig())
	tr := e.createTrade("order-1", 4990, rcv.srv.URL+"/v1/payments/notify")
	paid := e.pay("order-1")
	if paid.Status != TradeSuccess || paid.PaidAt == nil {
		t.Fatalf("paid trade = %+v", paid)
	}
	e.pay("order-1") // paying again changes nothing and sends nothing more

	waitFor(t, 2*time.Second, "three deliveries", func() bool { return rcv.count() >= 3 })
	time.Sleep(250 * time.Millisecond) // longer than any remaining step: nothing more comes
	got := rcv.deliveries()
	if len(got) != 3 {
		t.Fatalf("%d deliveries, want 3 (two refused, one acknowledged)", len(got))
	}
	for _, d := range got {
		checkTradeNotification(t, d, tr)
	}
	if gap := got[1].At.Sub(got[0].At); gap < 45*time.Millisecond {
		t.Errorf("first retry after %s, want the schedule's 50ms", gap)
	}
	if gap := got[2].At.Sub(got[1].At); gap < 95*time.Millisecond {
		t.Errorf("second retry after %s, want the schedule's 100ms", gap)
	}

	ns := e.notifications("order-1")
	if len(ns) != 1 {
		t.Fatalf("%d notifications, want 1", len(ns))
	}
	n := ns[0]
	if n.Status != NotificationDelivered || n.Rounds != 3 || len(n.Attempts) != 3 || n.NextAt != nil {
		t.Errorf("notification = %+v", n)
	}
	if a := n.Attempts[0]; a.Status != http.StatusInternalServerError || a.Success {
		t.Errorf("first attempt = %+v", a)
	}
	if a := n.Attempts[2]; a.Status != http.StatusOK || !a.Success || a.Answer != ack {
		t.Errorf("last attempt = %+v", a)
	}
}

func TestNotificationGivesUpWhenTheScheduleRunsOut(t *testing.T) {
	rcv := newReceiver(t, func(int) (int, string) { return http.StatusOK, `{"result":"fail"}` })
	cfg := testConfig()
	cfg.Schedule = []time.Duration{20 * time.Millisecond, 20 * time.Millisecond}
	e := newEnv(t, cfg)
	e.createTrade("order-1", 100, rcv.srv.URL)
	e.pay("order-1")
	waitFor(t, 2*time.Second, "the notification to give up", func() bool {
		ns := e.notifications("order-1")
		return len(ns) == 1 && ns[0].Status == NotificationGaveUp
	})
	if n := rcv.count(); n != 3 {
		t.Errorf("%d deliveries, want 3 (the immediate one and two retries)", n)
	}
}

func TestDropFaultLosesNotificationsUntilCleared(t *testing.T) {
	rcv := newReceiver(t, nil)
	cfg := testConfig()
	cfg.Schedule = []time.Duration{150 * time.Millisecond, 150 * time.Millisecond}
	e := newEnv(t, cfg)
	e.createTrade("order-1", 100, rcv.srv.URL)
	e.setFaults(map[string]any{"drop_notifications": 1})
	e.pay("order-1")
	waitFor(t, 2*time.Second, "a dropped attempt", func() bool {
		ns := e.notifications("order-1")
		return len(ns) == 1 && len(ns[0].Attempts) == 1
	})
	if a := e.notifications("order-1")[0].Attempts[0]; !a.Dropped || a.Success {
		t.Errorf("attempt = %+v, want dropped", a)
	}
	if n := rcv.count(); n != 0 {
		t.Fatalf("%d deliveries while dropping, want 0", n)
	}
	e.setFaults(map[string]any{})
	waitFor(t, 2*time.Second, "the retry to arrive", func() bool { return rcv.count() == 1 })
	waitFor(t, time.Second, "delivery to be recorded", func() bool {
		return e.notifications("order-1")[0].Status == NotificationDelivered
	})
}

func TestDuplicateFaultSendsExtraCopiesAtOnce(t *testing.T) {
	rcv := newReceiver(t, nil)
	e := newEnv(t, testConfig())
	tr := e.createTrade("order-1", 100, rcv.srv.URL)
	e.setFaults(Faults{DuplicateNotifications: 2})
	e.pay("order-1")
	waitFor(t, 2*time.Second, "three copies", func() bool { return rcv.count() == 3 })
	time.Sleep(200 * time.Millisecond)
	got := rcv.deliveries()
	if len(got) != 3 {
		t.Fatalf("%d deliveries, want 3 (one round of three copies)", len(got))
	}
	for _, d := range got {
		checkTradeNotification(t, d, tr)
	}
	n := e.notifications("order-1")[0]
	if n.Status != NotificationDelivered || n.Rounds != 1 || len(n.Attempts) != 3 {
		t.Errorf("notification = %+v", n)
	}
}

func TestDelayFaultDelaysNotifications(t *testing.T) {
	rcv := newReceiver(t, nil)
	e := newEnv(t, testConfig())
	e.createTrade("order-1", 100, rcv.srv.URL)
	e.setFaults(map[string]any{"notify_delay": "300ms"})
	var faults Faults
	e.mustDo(http.MethodGet, "/sim/faults", nil, http.StatusOK, &faults)
	if time.Duration(faults.NotifyDelay) != 300*time.Millisecond {
		t.Fatalf("faults = %+v", faults)
	}
	start := time.Now()
	e.pay("order-1")
	waitFor(t, 2*time.Second, "the delayed notification", func() bool { return rcv.count() == 1 })
	if late := rcv.deliveries()[0].At.Sub(start); late < 300*time.Millisecond {
		t.Errorf("notification arrived after %s, want at least 300ms", late)
	}
}

func TestPutFaultsRefusesValuesOutOfRange(t *testing.T) {
	e := newEnv(t, testConfig())
	for name, body := range map[string]any{
		"probability above 1":  map[string]any{"drop_notifications": 1.5},
		"negative probability": map[string]any{"fail_before_apply": -0.1},
		"negative duplicates":  map[string]any{"duplicate_notifications": -1},
		"bad duration":         map[string]any{"notify_delay": "soon"},
		"unknown fault":        map[string]any{"explode": true},
	} {
		t.Run(name, func(t *testing.T) {
			e.wantProblem(http.MethodPut, "/sim/faults", body, http.StatusBadRequest, "invalid_request")
		})
	}
	if f := e.sim.State().Faults; f != (Faults{}) {
		t.Errorf("faults = %+v after refused changes", f)
	}
}

func TestDurationJSON(t *testing.T) {
	b, err := json.Marshal(Faults{NotifyDelay: Duration(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	var f Faults
	if err := json.Unmarshal(b, &f); err != nil || time.Duration(f.NotifyDelay) != 2*time.Second {
		t.Errorf("round trip of %s = %+v, %v", b, f, err)
	}
}
