package drill

import (
	"bytes"
	"encoding/xml"
	"errors"
	"html"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// htmlFixture is a fixed drill run with every shape the report must draw: HTTP copies with
// each outcome, Kafka copies handled later, a lab run without outcome headers, a fifty-copy
// flash sale, a skipped run with no copies, a run that could not run, and text that needs
// escaping.
func htmlFixture() report {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	httpCopy := func(path string, start, dur float64, status int, outcome, code string) copyRecord {
		return copyRecord{Path: path, Via: "http", Route: "POST /v1/payments/notify", RequestID: "drill-T-1",
			StartMS: start, DurationMS: dur, Status: status, Outcome: outcome, Code: code, Replayed: outcome == "replayed"}
	}
	kafkaCopy := func(start, ack, consumed float64, offset int64) copyRecord {
		return copyRecord{Path: "kafka redelivery", Via: "kafka", Route: "kafka " + paymentTopic, RequestID: "drill-T-2",
			StartMS: start, DurationMS: ack, ConsumedMS: consumed, Placement: &placement{Partition: 1, Offset: offset}}
	}
	i1 := result{ID: "I1", Name: "triple delivery", Target: "oncepay", Verdict: verdictHeld,
		Summary:  "paid once, sold +1, never regressed; 2 copies stopped: 2 in_progress; 3 Kafka copies absorbed",
		Expected: "PAID once; stock available -1, reserved +0, sold +1; status never leaves PAID",
		Observed: "PAID; stock available -1, reserved +0, sold +1; statuses PENDING_PAYMENT → PAID",
		Notes:    []string{"Kafka copies consumed: group oncepay-payments had committed past each within 6.4s of its publication"},
		Copies: []copyRecord{
			httpCopy("channel retry", 0.3, 6080, 200, "executed", ""),
			httpCopy("gateway retry", 0.4, 72, 409, "in_progress", "idempotency_key_in_use"),
			httpCopy("client retry", 0.5, 71, 409, "in_progress", "idempotency_key_in_use"),
			kafkaCopy(0.2, 44, 6420, 17), kafkaCopy(0.6, 45, 6430, 18), kafkaCopy(0.9, 44, 6440, 19),
		},
		MetricsNote: metricsOverlapNote}
	i4 := result{ID: "I4", Name: "lock expiry under a slow payment", Target: "oncepay", Verdict: verdictHeld,
		Summary: "paid once across copies spread over 5.5s; 3 copies stopped: 3 in_progress",
		Copies: []copyRecord{httpCopy("first delivery", 0, 6004, 200, "executed", ""), httpCopy("retry +1s", 1000, 2, 409, "in_progress", "idempotency_key_in_use"),
			httpCopy("retry +3s", 3000, 1, 409, "in_progress", "idempotency_key_in_use"), httpCopy("retry +5.5s", 5500, 2, 409, "in_progress", "idempotency_key_in_use")},
		Metrics: map[string]float64{`oncepay_idempotency_outcomes_total{biz_type="payment.notify",layer="lock",outcome="in_progress"}`: 3}}
	i4lab := result{ID: "I4", Name: "lock expiry under a slow payment", Target: "lab", Verdict: verdictReproduced,
		Summary: "paid_at changed 1 time: paid more than once", Effect: []string{"stock available -1, reserved -1, sold +2, want available -1, reserved +0, sold +1"},
		Copies: []copyRecord{httpCopy("first delivery", 0, 6300, 200, "", ""), httpCopy("retry +1s", 1000, 2, 409, "", "idempotency_key_in_use"),
			httpCopy("retry +3s", 3000, 2, 409, "", "idempotency_key_in_use"), httpCopy("retry +5.5s", 5500, 6020, 200, "", "")}}
	i6 := result{ID: "I6", Name: "purge before redelivery", Target: "oncepay", Verdict: verdictViolated,
		Summary: "the order moved backwards", Answers: []string{"notifications must answer 200 or 409, got: 1 × 500 internal"},
		Copies: []copyRecord{httpCopy("channel redelivery", 0, 6000, 200, "state_rejected", ""), httpCopy("gateway redelivery", 1, 3, 500, "", "internal"),
			{Path: "client retry", Via: "http", StartMS: 2, DurationMS: 60000, Error: "context deadline exceeded"}}}
	i7 := result{ID: "I7", Name: "double click", Target: "oncepay", Verdict: verdictHeld, Summary: "one order per token",
		Copies: []copyRecord{httpCopy("first click", 0, 4, 201, "executed", ""), httpCopy("second click", 5, 1, 201, "replayed", ""),
			httpCopy("stale token", 7, 1, 400, "token_invalid", "idempotency_token_invalid"), httpCopy("edited form", 9, 1, 422, "mismatch", "idempotency_key_reused")}}
	var buyers []copyRecord
	for i := range 50 {
		status, code := 409, "out_of_stock"
		if i%10 == 0 {
			status, code = 201, ""
		}
		buyers = append(buyers, httpCopy("buyer", float64(i)/10, 40+float64(i)*3, status, "executed", code))
	}
	flash := result{ID: "flash-sale", Name: "flash sale", Target: "oncepay", Verdict: verdictHeld,
		Summary: "5 sold, 45 × out_of_stock, available never below 0", Copies: buyers}
	skipped := result{ID: "I5", Name: "payment after close", Target: "oncepay", Verdict: verdictSkipped, Summary: "ORDER_TTL too long: 15m0s"}
	broken := result{ID: "I2", Name: "concurrent recharge callbacks", Target: "lab", Verdict: verdictError,
		Summary: `POST /lab/recharges/notify answered 404 <script>alert("x")</script> & more`, Error: `404 <script>alert("x")</script> & more`,
		Copies: []copyRecord{httpCopy(`<script>alert("x")</script>`, 0, 3, 404, "", "not_found")}}
	r := report{URL: "http://127.0.0.1:18080", RunID: "0A1B2C3D", Kafka: []string{"127.0.0.1:19099"}, Lab: true, StartedAt: t0,
		Results: []result{i1, broken, i4, i4lab, skipped, i6, i7, flash}}
	r.finish()
	r.FinishedAt = t0.Add(37100 * time.Millisecond)
	r.Metrics = map[string]float64{`oncepay_idempotency_outcomes_total{biz_type="order.create",layer="work",outcome="executed"}`: 60}
	return r
}

var (
	svgElement = regexp.MustCompile(`(?s)<svg\b.*?</svg>`)
	laneGroup  = regexp.MustCompile(`<g class="lane" data-path="([^"]*)" data-category="([^"]*)">`)
)

func renderFixture(t *testing.T) (report, string) {
	t.Helper()
	r := htmlFixture()
	var b bytes.Buffer
	if err := writeHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	return r, b.String()
}

func TestHTMLReportIsOneSelfContainedPage(t *testing.T) {
	_, page := renderFixture(t)
	if !strings.HasPrefix(page, "<!DOCTYPE html>\n<html lang=\"en\">") || !strings.HasSuffix(strings.TrimSpace(page), "</html>") {
		t.Errorf("not a whole HTML document:\n%.200s … %s", page, page[max(0, len(page)-100):])
	}
	outside := svgElement.ReplaceAllString(page, "") // bars have <title>s of their own
	for _, tag := range []string{"<head>", "</head>", "<body>", "</body>", "<title>", "<style>", "<main>", "</main>"} {
		if strings.Count(outside, tag) != 1 {
			t.Errorf("%s appears %d times outside the timelines, want once", tag, strings.Count(outside, tag))
		}
	}
	// Nothing is fetched: no scripts, stylesheets, images, fonts or links off the page. The
	// SVG namespace is a name, not a fetch.
	for _, external := range []string{"<script", "<link", "<img", "<iframe", "@import", "src=", "url(http", "href=\"http", "href=\"//"} {
		if strings.Contains(strings.ReplaceAll(page, "&lt;script&gt;", ""), external) {
			t.Errorf("the page refers to something outside itself: %q", external)
		}
	}
	// The whole page tokenizes as HTML: every element closes where it should.
	dec := xml.NewDecoder(strings.NewReader(strings.TrimPrefix(page, "<!DOCTYPE html>")))
	dec.Strict, dec.AutoClose, dec.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	depth := 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the page does not parse: %v", err)
		}
		switch tok.(type) {
		case xml.StartElement:
			depth++
		case xml.EndElement:
			depth--
		}
	}
	if depth != 0 {
		t.Errorf("unbalanced elements: depth %d at the end", depth)
	}
}

func TestHTMLReportHasATimelinePerRunAndALanePerCopy(t *testing.T) {
	r, page := renderFixture(t)
	svgs := svgElement.FindAllString(page, -1)
	if len(svgs) != len(r.Results) {
		t.Fatalf("%d <svg> elements for %d runs", len(svgs), len(r.Results))
	}
	for i, svg := range svgs {
		res := r.Results[i]
		// Each SVG is well-formed XML on its own, as an .svg file would have to be.
		dec := xml.NewDecoder(strings.NewReader(svg))
		for {
			if _, err := dec.Token(); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("run %d (%s %s): the SVG is not well-formed XML: %v", i, res.ID, res.Target, err)
			}
		}
		lanes := laneGroup.FindAllStringSubmatch(svg, -1)
		if len(lanes) != len(res.Copies) {
			t.Errorf("run %d (%s %s): %d lanes for %d copies", i, res.ID, res.Target, len(lanes), len(res.Copies))
			continue
		}
		for j, lane := range lanes {
			c := res.Copies[j]
			if want := esc(c.Path); lane[1] != want {
				t.Errorf("run %d lane %d is labelled %q, want the copy's path %q", i, j, lane[1], want)
			}
			if want := categoryOf(c).Key; lane[2] != want {
				t.Errorf("run %d lane %d (%s) is coloured as %q, want %q", i, j, c.Path, lane[2], want)
			}
		}
		if !strings.Contains(svg, `role="img"`) || !strings.Contains(svg, "<title id=") || !strings.Contains(svg, "<desc id=") {
			t.Errorf("run %d: the SVG has no accessible name and description", i)
		}
	}
	// The runs of one scenario share their axis: I4 against oncepay and against the lab.
	if a, b := tickLabels(svgs[2]), tickLabels(svgs[3]); strings.Join(a, " ") != strings.Join(b, " ") || len(a) < 3 {
		t.Errorf("I4's two runs have different axes: %v and %v", a, b)
	}
}

func tickLabels(svg string) []string {
	var ticks []string
	for _, m := range regexp.MustCompile(`<text class="tick"[^>]*>([^<]*)</text>`).FindAllStringSubmatch(svg, -1) {
		ticks = append(ticks, m[1])
	}
	return ticks
}

func TestHTMLReportShowsVerdictsLegendAndExpectations(t *testing.T) {
	r, page := renderFixture(t)
	for _, cat := range categories {
		if !strings.Contains(page, "<strong>"+cat.Label+"</strong>") || !strings.Contains(page, cat.Color) {
			t.Errorf("the legend has no %s (%s)", cat.Label, cat.Color)
		}
	}
	for _, want := range []string{
		`<span class="badge held">held</span>`, `<span class="badge reproduced">REPRODUCED</span>`,
		`<span class="badge violated">VIOLATED</span>`, `<span class="badge skipped">skipped</span>`, `<span class="badge error">error</span>`,
		"<dt>Expected</dt><dd>PAID once; stock available -1, reserved +0, sold +1; status never leaves PAID</dd>",
		"<dt>Observed (final state)</dt><dd>PAID; stock available -1, reserved +0, sold +1; statuses PENDING_PAYMENT → PAID</dd>",
		"effect: stock available -1, reserved -1, sold +2", "answer: notifications must answer 200 or 409",
		"acked in 44ms · handled by +6.4s", "200 · executed · 6.1s", "409 · in_progress · 72ms", "404 not_found · no layer · 3ms",
		"no answer after 60.0s", "200 · no layer · 6.3s", "took 37.1s", `4 held`, `1 REPRODUCED`,
	} {
		if !strings.Contains(html.UnescapeString(page), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(page, `<script>alert`) {
		t.Error("text from the server reached the page unescaped")
	}
	if n := strings.Count(page, `<article class="card run"`); n != len(r.Results) {
		t.Errorf("%d run sections for %d runs", n, len(r.Results))
	}
}

func TestNiceStep(t *testing.T) {
	for end, want := range map[float64]float64{0: 1, 4: 1, 40: 10, 72: 20, 6440: 2000, 12000: 2000, 60000: 10000} {
		if got := niceStep(end); got != want {
			t.Errorf("niceStep(%g) = %g, want %g", end, got, want)
		}
	}
}

func TestWriteHTMLFileReplacesTheFileWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeHTMLFile(path, htmlFixture()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) {
		t.Fatalf("read back %.40q, %v", b, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("left behind: %v", entries)
	}
}

// TestHTMLColoursEveryOutcome checks that the timeline tells outcomes apart by colour: the
// flash sale's five sales and forty-five out_of_stock refusals, which all executed, are two
// colours, and the lab's copies, which carry no Idempotency-Outcome, are coloured by their
// answer. Each run's tally counts its copies per colour.
func TestHTMLColoursEveryOutcome(t *testing.T) {
	r, page := renderFixture(t)
	svgs := svgElement.FindAllString(page, -1)
	count := func(svg string) map[string]int {
		n := map[string]int{}
		for _, lane := range laneGroup.FindAllStringSubmatch(svg, -1) {
			n[lane[2]]++
		}
		return n
	}
	for i, res := range r.Results {
		switch {
		case res.ID == "flash-sale":
			if got := count(svgs[i]); got["executed"] != 5 || got["refused"] != 45 || len(got) != 2 {
				t.Errorf("flash sale lanes by colour: %v, want 5 executed and 45 refused", got)
			}
			if !strings.Contains(page, "executed / sold ×5") || !strings.Contains(page, "refused / out_of_stock ×45") {
				t.Error("the flash sale's tally does not count 5 sold and 45 refused")
			}
		case res.ID == "I4" && res.Target == "lab":
			if got := count(svgs[i]); got["executed"] != 2 || got["in_progress"] != 2 {
				t.Errorf("I4 lab lanes by colour: %v, want 2 executed (200) and 2 in_progress (409 idempotency_key_in_use)", got)
			}
		}
	}
	for _, c := range []struct {
		rec  copyRecord
		want string
	}{
		{copyRecord{Via: "http", Status: 201, Outcome: "executed"}, "executed"},
		{copyRecord{Via: "http", Status: 409, Outcome: "executed", Code: "out_of_stock"}, "refused"},
		{copyRecord{Via: "http", Status: 409, Code: "out_of_stock"}, "refused"},
		{copyRecord{Via: "http", Status: 200}, "executed"},
		{copyRecord{Via: "http", Status: 409, Code: "idempotency_key_in_use"}, "in_progress"},
		{copyRecord{Via: "http", Status: 200, Outcome: "replayed"}, "replayed"},
		{copyRecord{Via: "http", Status: 422, Outcome: "mismatch", Code: "idempotency_key_reused"}, "mismatch"},
		{copyRecord{Via: "http", Status: 409, Code: "trade_closed"}, "refused"}, // the simulator refusing the buyer (I12's lab row)
		{copyRecord{Via: "http", Status: 404, Code: "not_found"}, "error"},
		{copyRecord{Via: "http", Status: 500, Outcome: "executed"}, "error"},
		{copyRecord{Via: "http", Status: 400, Outcome: "rejected"}, "error"},
		{copyRecord{Via: "kafka"}, "kafka"},
	} {
		if got := categoryOf(c.rec).Key; got != c.want {
			t.Errorf("categoryOf(%d %q %s) = %s, want %s", c.rec.Status, c.rec.Code, c.rec.Outcome, got, c.want)
		}
	}
}
