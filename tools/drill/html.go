package drill

import (
	"bytes"
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// The HTML report is one self-contained page: inline CSS, one inline SVG timeline per run, no
// script, no font, no image and no link to anything outside the file, so that it can be
// attached to a ticket or opened from a CI artifact as it is.

// category is how a copy was answered, as the timeline colours it: the outcome of the copy,
// from the Idempotency-Outcome the server sent and its status, or, on the lab's routes that
// send no outcome, from the status and problem code alone.
type category struct {
	Key, Label, Color, Meaning string
}

// categories are the timeline's colours, in legend order: one colour per outcome, so that a
// run's bars say at a glance how many copies did the work and what stopped the others (five
// sales and forty-five out_of_stock refusals are two colours, not one). The palette is Okabe
// and Ito's, which stays distinct under the common colour-vision deficiencies; every bar also
// carries its answer as text, so colour is never the only cue.
var categories = []category{
	{"executed", "executed / sold", "#0072B2", "did the work: the order made, the unit sold, the payment or credit applied (a 2xx that executed; on the lab, any 2xx)"},
	{"replayed", "replayed", "#009E73", "got the first copy's stored answer again (replay cache or dedup record); the work did not run"},
	{"in_progress", "in_progress", "#E69F00", "turned away while the first copy was still working (the lock, or its uncommitted dedup record): 409 idempotency_key_in_use"},
	{"refused", "refused / out_of_stock", "#CC79A7", "the work ran and refused: not enough stock (409 out_of_stock) or another business refusal"},
	{"state_rejected", "state_rejected", "#56B4E9", "a state precondition turned it away (the order had moved on); the channel still gets 200"},
	{"token_invalid", "token_invalid", "#000000", "not a live one-time token of this user"},
	{"mismatch", "mismatch", "#F0E442", "same key, different request (422)"},
	{"error", "error", "#D55E00", "no answer, a 5xx, or an answer the drill does not expect (404, 401, …)"},
	{"kafka", "kafka", "#4D4D4D", "published to Kafka: solid to the broker's ack, hatched until the consumer group committed past it"},
}

// categoryError is the key every copy without a category of its own falls back to.
const categoryError = "error"

// categoryOf picks the category of one copy. A copy that executed and refused (409
// out_of_stock) is a refusal, not a sale. A copy answered without Idempotency-Outcome (the
// lab's routes, which have no idempotency layer) is coloured by its answer: a 2xx did the
// work, a 409 idempotency_key_in_use met the lab's lock, another 409 or a 422 is a business
// refusal; its text still says "no layer".
func categoryOf(c copyRecord) category {
	key := c.Outcome
	switch {
	case c.Error != "" || c.Status >= 500:
		key = categoryError
	case c.Via == "kafka":
		key = "kafka"
	case c.Outcome == "" || c.Outcome == "executed":
		key = answerCategory(c)
	}
	return categoryByKey(key)
}

// answerCategory is the category of a copy that no idempotency layer stopped, from its status
// and problem code.
func answerCategory(c copyRecord) string {
	switch {
	case c.Status >= 200 && c.Status < 300:
		return "executed"
	case c.Code == "idempotency_key_in_use":
		return "in_progress"
	case c.Status == 409 || c.Status == 422:
		return "refused"
	}
	return categoryError
}

// categoryByKey returns the category named key, or the error category for an unknown one.
func categoryByKey(key string) category {
	for _, cat := range categories {
		if cat.Key == key {
			return cat
		}
	}
	return categoryByKey(categoryError)
}

// tally is how many copies of one run fell into one category: the run's own legend.
type tally struct {
	Category category
	N        int
}

// tallyOf counts a run's copies per category, in legend order, leaving out the empty ones.
func tallyOf(copies []copyRecord) []tally {
	counts := map[string]int{}
	for _, c := range copies {
		counts[categoryOf(c).Key]++
	}
	var out []tally
	for _, cat := range categories {
		if n := counts[cat.Key]; n > 0 {
			out = append(out, tally{cat, n})
		}
	}
	return out
}

// writeHTMLFile writes the report to path, through a temporary file in the same directory so
// that a reader never sees half a page.
func writeHTMLFile(path string, r report) error {
	var b bytes.Buffer
	if err := writeHTML(&b, r); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".drill-report-*.html")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// writeHTML renders the report page.
func writeHTML(w io.Writer, r report) error {
	page := htmlPage{Report: r, Categories: categories, Totals: totalsLine(r.Totals),
		Took: fmtMS(ms(r.FinishedAt.Sub(r.StartedAt))), Kafka: orNone(strings.Join(r.Kafka, ", "))}
	for _, v := range verdictOrder {
		if n := r.Totals[v]; n > 0 {
			page.Counts = append(page.Counts, verdictCount{Verdict: v, Class: badgeClass(v), N: n})
		}
	}
	scales := axisScales(r.Results)
	for i, res := range r.Results {
		page.Runs = append(page.Runs, htmlRun{
			Anchor: "run-" + strconv.Itoa(i+1),
			Result: res,
			Badge:  badgeClass(res.Verdict),
			// Every text in the SVG went through esc.
			SVG:     template.HTML(timelineSVG(i+1, res, scales[res.ID+"\x00"+res.Name])),
			Tally:   tallyOf(res.Copies),
			Metrics: sortedMetrics(res.Metrics),
		})
	}
	page.RunMetrics = sortedMetrics(r.Metrics)
	return pageTemplate.Execute(w, page)
}

// htmlPage is what the page template reads.
type htmlPage struct {
	Report     report
	Runs       []htmlRun
	Categories []category
	Totals     string
	Counts     []verdictCount
	Took       string
	Kafka      string
	RunMetrics []metricLine
}

// verdictCount is one of the totals' badges.
type verdictCount struct {
	Verdict verdict
	Class   string
	N       int
}

// htmlRun is one scenario against one target.
type htmlRun struct {
	Anchor string
	Result result
	Badge  string
	SVG    template.HTML
	// Tally is the run's legend: its copies counted per colour.
	Tally   []tally
	Metrics []metricLine
}

// metricLine is one counter series and how much it moved.
type metricLine struct {
	Series string
	Delta  string
}

// sortedMetrics lists counter deltas by series.
func sortedMetrics(m map[string]float64) []metricLine {
	var lines []metricLine
	for _, s := range sortedKeys(m) {
		lines = append(lines, metricLine{s, fmt.Sprintf("%+g", m[s])})
	}
	return lines
}

// badgeClass is the CSS class of a verdict's badge.
func badgeClass(v verdict) string {
	switch v {
	case verdictHeld:
		return "held"
	case verdictViolated:
		return "violated"
	case verdictReproduced:
		return "reproduced"
	case verdictNotReproduced:
		return "not-reproduced"
	case verdictError:
		return "error"
	}
	return "skipped"
}

// axisScales gives the runs of one scenario (its oncepay and lab rows) one time axis, so that
// their timelines compare at a glance. It maps id and name to the axis end in milliseconds.
func axisScales(results []result) map[string]float64 {
	ends := map[string]float64{}
	for _, r := range results {
		k := r.ID + "\x00" + r.Name
		for _, c := range r.Copies {
			ends[k] = max(ends[k], c.StartMS+c.DurationMS, c.ConsumedMS)
		}
	}
	return ends
}

// niceStep is the tick spacing, 1, 2 or 5 times a power of ten, that cuts [0, end] into at
// most six intervals.
func niceStep(end float64) float64 {
	if end <= 0 {
		return 1
	}
	raw := end / 6
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*pow >= raw {
			return m * pow
		}
	}
	return 10 * pow
}

// Timeline geometry, in SVG user units (the SVG scales to the page width).
const (
	svgWidth   = 1000.0
	labelRight = 168.0 // lane labels end here
	plotLeft   = 180.0
	plotRight  = 692.0
	answerLeft = 716.0 // the answer column
	axisTop    = 30.0  // room for the tick labels above the lanes
)

// laneHeight shrinks the lanes of a run with many copies (the flash sale fires fifty).
func laneHeight(n int) float64 {
	switch {
	case n <= 12:
		return 22
	case n <= 30:
		return 16
	}
	return 12
}

// timelineSVG draws one run: a lane per copy, labelled by its delivery path, with a bar from
// the moment it left to the moment it was answered, coloured by the layer that answered it.
// Every text in it goes through html.EscapeString, which suits SVG as well as HTML.
func timelineSVG(n int, r result, end float64) string {
	id := "tl-" + strconv.Itoa(n)
	lanes := len(r.Copies)
	lh := laneHeight(lanes)
	height := axisTop + float64(max(lanes, 1))*lh + 12
	step := niceStep(end)
	end = math.Max(step, math.Ceil(end/step)*step)
	x := func(v float64) float64 { return plotLeft + (plotRight-plotLeft)*v/end }

	var b strings.Builder
	class := "timeline"
	if lh < 16 {
		class += " dense"
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="%s" viewBox="0 0 %.0f %.0f" width="100%%" role="img" aria-labelledby="%s-title %s-desc">`,
		class, svgWidth, height, id, id)
	fmt.Fprintf(&b, `<title id="%s-title">%s</title>`, id, esc(fmt.Sprintf("Timeline of %s %s against %s", r.ID, r.Name, r.Target)))
	fmt.Fprintf(&b, `<desc id="%s-desc">%s</desc>`, id, esc(timelineDesc(r)))
	b.WriteString(`<defs><pattern id="` + id + `-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
		`<rect width="6" height="6" fill="#ECECEC"/><rect width="2.5" height="6" fill="#4D4D4D"/></pattern></defs>`)

	// The axis: ticks and grid lines from 0 to end, labelled above the lanes.
	fmt.Fprintf(&b, `<text class="axis-title" x="%.1f" y="12">after the first copy</text>`, labelRight)
	for t := 0.0; t <= end+step/2; t += step {
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, x(t), axisTop-6, x(t), height-8)
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%.1f">%s</text>`, x(t), axisTop-10, esc(tickLabel(t, step)))
	}
	fmt.Fprintf(&b, `<text class="axis-title answer-head" x="%.1f" y="%.1f">answer</text>`, answerLeft, axisTop-10)
	if lanes == 0 {
		fmt.Fprintf(&b, `<text class="empty" x="%.1f" y="%.1f">no copies were fired</text>`, plotLeft, axisTop+lh*0.7)
	}

	for i, c := range r.Copies {
		top := axisTop + float64(i)*lh
		mid := top + lh/2
		cat := categoryOf(c)
		barH := math.Round(lh*0.62*10) / 10
		fmt.Fprintf(&b, `<g class="lane" data-path="%s" data-category="%s">`, esc(c.Path), cat.Key)
		if i%2 == 1 {
			fmt.Fprintf(&b, `<rect class="zebra" x="0" y="%.1f" width="%.0f" height="%.1f"/>`, top, svgWidth, lh)
		}
		label := c.Path
		if i > 0 && r.Copies[i-1].Path == c.Path && lh < 16 {
			label = "" // fifty "buyer" labels in a row say nothing the first one does not
		}
		if label != "" {
			fmt.Fprintf(&b, `<text class="label" x="%.1f" y="%.1f">%s</text>`, labelRight, mid+4, esc(label))
		}
		x0, x1 := x(c.StartMS), x(c.StartMS+c.DurationMS)
		if x1-x0 < 2 {
			x1 = x0 + 2
		}
		if c.Via == "kafka" && c.ConsumedMS > c.StartMS+c.DurationMS {
			fmt.Fprintf(&b, `<rect class="queued" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="url(#%s-hatch)"/>`,
				x1, mid-barH/2, math.Max(x(c.ConsumedMS)-x1, 1), barH, id)
		}
		fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="2" fill="%s"><title>%s</title></rect>`,
			x0, mid-barH/2, x1-x0, barH, cat.Color, esc(copyTooltip(c)))
		fmt.Fprintf(&b, `<text class="answer" x="%.1f" y="%.1f">%s</text>`, answerLeft, mid+4, esc(answerText(c)))
		b.WriteString(`</g>`)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// timelineDesc summarises a timeline for screen readers.
func timelineDesc(r result) string {
	if len(r.Copies) == 0 {
		return "No copies were fired."
	}
	counts := map[string]int{}
	for _, c := range r.Copies {
		counts[categoryOf(c).Label]++
	}
	return fmt.Sprintf("%d %s, %s. %s", len(r.Copies), plural(len(r.Copies), "copy", "copies"), countList(counts, " "), firedLine(r.Copies))
}

// tickLabel prints a tick at t milliseconds, in seconds once the step is a second or more.
func tickLabel(t, step float64) string {
	switch {
	case t == 0:
		return "0"
	case step >= 1000:
		return strconv.FormatFloat(t/1000, 'f', -1, 64) + "s"
	case step < 1:
		return strconv.FormatFloat(t, 'f', 1, 64) + "ms"
	}
	return strconv.FormatFloat(t, 'f', 0, 64) + "ms"
}

// answerText is the answer column: status, the layer that answered, and the time it took.
func answerText(c copyRecord) string {
	switch {
	case c.Error != "":
		return "no answer after " + fmtMS(c.DurationMS)
	case c.Via == "kafka" && c.ConsumedMS > 0:
		return fmt.Sprintf("acked in %s · handled by +%s", fmtMS(c.DurationMS), fmtMS(c.ConsumedMS))
	case c.Via == "kafka":
		return fmt.Sprintf("acked in %s · handling not confirmed", fmtMS(c.DurationMS))
	}
	layer := c.Outcome
	if layer == "" {
		layer = "no layer"
	}
	status := statusText(c)
	if c.Code == outcomeCodes[c.Outcome] {
		status = strconv.Itoa(c.Status) // the code only repeats the outcome; the tooltip has it
	}
	return fmt.Sprintf("%s · %s · %s", status, layer, fmtMS(c.DurationMS))
}

// outcomeCodes are the problem codes that go with an outcome and say nothing more than it.
var outcomeCodes = map[string]string{
	"":               "",
	"executed":       "",
	"replayed":       "",
	"state_rejected": "",
	"in_progress":    "idempotency_key_in_use",
	"mismatch":       "idempotency_key_reused",
	"token_invalid":  "idempotency_token_invalid",
}

// copyTooltip is the bar's title: everything recorded about the copy.
func copyTooltip(c copyRecord) string {
	parts := []string{c.Path, c.Route, answerText(c), "left at +" + fmtMS(c.StartMS)}
	if c.Code != "" {
		parts = append(parts, "code "+c.Code)
	}
	if c.Replayed {
		parts = append(parts, "Idempotent-Replayed: true")
	}
	if c.Ref != "" {
		parts = append(parts, "ref "+c.Ref)
	}
	if c.Placement != nil {
		parts = append(parts, fmt.Sprintf("partition %d offset %d", c.Placement.Partition, c.Placement.Offset))
	}
	if c.RequestID != "" {
		parts = append(parts, "X-Request-Id "+c.RequestID)
	}
	if c.Error != "" {
		parts = append(parts, c.Error)
	}
	return strings.Join(parts, " — ")
}

// esc escapes text for HTML and SVG alike.
func esc(s string) string { return html.EscapeString(s) }

// pageTemplate is the page around the timelines; html/template escapes every text in it.
var pageTemplate = template.Must(template.New("report").Funcs(template.FuncMap{
	// css passes a colour of the palette above, a constant, into a style attribute.
	"css": func(s string) template.CSS { return template.CSS(s) },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>oncepay drill {{.Report.RunID}} — {{.Totals}}</title>
<style>
:root { --ink: #1d2330; --muted: #5b6473; --line: #d9dde3; --card: #ffffff; --page: #f5f6f8; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--page); color: var(--ink);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main, header.page, section, nav { max-width: 1120px; margin: 0 auto; padding: 0 20px; }
header.page { padding-top: 28px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 0; }
h3 { font-size: 14px; margin: 18px 0 6px; color: var(--muted); text-transform: uppercase; letter-spacing: .04em; }
.meta { color: var(--muted); margin: 0 0 12px; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px; }
.badge { display: inline-block; padding: 2px 10px; border-radius: 999px; font-weight: 650; font-size: 13px;
  border: 1px solid transparent; white-space: nowrap; }
.badge.held { background: #e3f4e8; color: #14532d; border-color: #9fd5b0; }
.badge.reproduced { background: #ede7f6; color: #3b1f8f; border-color: #c5b3ea; }
.badge.violated { background: #fde8e8; color: #8e1111; border-color: #f2a7a7; }
.badge.not-reproduced { background: #fff1dc; color: #7a3e00; border-color: #f0c58a; }
.badge.error { background: #fff; color: #8e1111; border-color: #d33; }
.badge.skipped { background: #eceef1; color: #3d4450; border-color: #cfd4da; }
.totals .badge { margin-right: 6px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 16px 20px; margin: 16px 0; }
.legend ul { list-style: none; padding: 0; margin: 0; display: grid; grid-template-columns: repeat(auto-fill, minmax(330px, 1fr)); gap: 6px 18px; }
.legend li { display: flex; gap: 8px; align-items: baseline; font-size: 14px; }
.swatch { flex: none; width: 26px; height: 12px; border-radius: 2px; border: 1px solid rgba(0,0,0,.35); position: relative; top: 1px; }
.tally { display: flex; flex-wrap: wrap; gap: 4px 18px; margin: 6px 0 0; font-size: 13px; color: var(--muted); }
.tally-item { display: inline-flex; gap: 6px; align-items: baseline; }
.tally .swatch { display: inline-block; width: 18px; height: 10px; }
.swatch.kafka { background: linear-gradient(90deg, #4D4D4D 50%, transparent 50%), repeating-linear-gradient(45deg, #4D4D4D 0 2px, #ECECEC 2px 5px); }
table.summary { width: 100%; border-collapse: collapse; font-size: 14px; }
table.summary th, table.summary td { text-align: left; padding: 6px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
table.summary th { color: var(--muted); font-weight: 600; }
table.summary a { color: inherit; }
article.run > header { display: flex; align-items: center; gap: 12px; flex-wrap: wrap; }
.target { font-weight: 500; color: var(--muted); }
.target.lab { color: #6b3fa0; }
.summary-line { margin: 8px 0 4px; }
svg.timeline { display: block; margin: 10px 0 4px; font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }
svg.timeline .grid { stroke: #e3e6ea; stroke-width: 1; }
svg.timeline .tick { font-size: 11px; fill: #5b6473; text-anchor: middle; }
svg.timeline .axis-title { font-size: 11px; fill: #5b6473; text-anchor: end; }
svg.timeline .answer-head { text-anchor: start; }
svg.timeline .label { font-size: 12px; fill: #1d2330; text-anchor: end; }
svg.timeline .answer { font-size: 11.5px; fill: #1d2330; }
svg.timeline .empty { font-size: 12px; fill: #5b6473; }
svg.timeline.dense .label, svg.timeline.dense .answer { font-size: 10px; }
svg.timeline .zebra { fill: #f7f8fa; }
svg.timeline .bar { stroke: rgba(0,0,0,.45); stroke-width: .75; }
svg.timeline .queued { stroke: rgba(0,0,0,.25); stroke-width: .5; }
dl.eo { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 10px 0 0; }
dl.eo dt { font-weight: 600; color: var(--muted); }
dl.eo dd { margin: 0; }
ul.findings { margin: 8px 0 0; padding-left: 20px; }
ul.findings li.effect { color: #8e1111; }
ul.findings li.answer { color: #7a3e00; }
ul.findings li.note { color: var(--muted); }
details { margin-top: 8px; font-size: 13px; }
details table { border-collapse: collapse; }
details td { padding: 1px 10px 1px 0; }
footer { max-width: 1120px; margin: 0 auto; padding: 8px 20px 40px; color: var(--muted); font-size: 13px; }
@media print { body { background: #fff; } .card { break-inside: avoid; } }
</style>
</head>
<body>
<header class="page">
<h1>oncepay incident drill</h1>
<p class="meta">run <code>{{.Report.RunID}}</code> against <code>{{.Report.URL}}</code> · Kafka {{.Kafka}} · lab {{if .Report.Lab}}on{{else}}off{{end}} ·
started {{.Report.StartedAt.Format "2006-01-02 15:04:05 MST"}} · took {{.Took}} · exit status {{.Report.ExitCode}}</p>
<p class="totals">{{range .Counts}}<span class="badge {{.Class}}">{{.N}} {{.Verdict}}</span>{{end}}</p>
</header>

<section aria-labelledby="legend-h">
<div class="card legend">
<h2 id="legend-h">How each copy was answered</h2>
<p class="meta">One lane per copy, labelled by the path it stands for; each bar runs from the moment the copy left to the moment it was answered, on a time axis shared by the runs of one scenario. Its colour is the copy's outcome: the <code>Idempotency-Outcome</code> the server answered with — the layer that stopped it — and, for a copy that executed, whether the work did the change or refused it. The lab's routes send no outcome (no idempotency layer): their copies are coloured by their answer. Under each timeline, the run's copies are counted per colour.</p>
<ul>
{{range .Categories}}<li><span class="swatch{{if eq .Key "kafka"}} kafka{{end}}" style="background-color: {{css .Color}}"></span><span><strong>{{.Label}}</strong> — {{.Meaning}}</span></li>
{{end}}</ul>
</div>
</section>

<nav aria-labelledby="summary-h">
<div class="card">
<h2 id="summary-h">Verdicts</h2>
<table class="summary">
<thead><tr><th>Scenario</th><th>Target</th><th>Verdict</th><th>Summary</th></tr></thead>
<tbody>
{{range .Runs}}<tr><td><a href="#{{.Anchor}}">{{.Result.ID}} {{.Result.Name}}</a></td><td>{{.Result.Target}}</td><td><span class="badge {{.Badge}}">{{.Result.Verdict}}</span></td><td>{{.Result.Summary}}</td></tr>
{{end}}</tbody>
</table>
</div>
</nav>

<main>
{{range .Runs}}<article class="card run" id="{{.Anchor}}">
<header><h2>{{.Result.ID}} {{.Result.Name}} <span class="target {{.Result.Target}}">against {{.Result.Target}}</span></h2><span class="badge {{.Badge}}">{{.Result.Verdict}}</span></header>
<p class="summary-line">{{.Result.Summary}}</p>
{{.SVG}}
{{if .Tally}}<p class="tally" aria-label="copies per outcome">{{range .Tally}}<span class="tally-item"><span class="swatch{{if eq .Category.Key "kafka"}} kafka{{end}}" style="background-color: {{css .Category.Color}}"></span>{{.Category.Label}} ×{{.N}}</span>{{end}}</p>{{end}}
<dl class="eo">
<dt>Expected</dt><dd>{{if .Result.Expected}}{{.Result.Expected}}{{else}}—{{end}}</dd>
<dt>Observed (final state)</dt><dd>{{if .Result.Observed}}{{.Result.Observed}}{{else}}—{{end}}</dd>
</dl>
{{if or .Result.Effect .Result.Answers .Result.Notes .Result.Error}}<ul class="findings">
{{if .Result.Error}}<li class="effect">could not run: {{.Result.Error}}</li>{{end}}
{{range .Result.Effect}}<li class="effect">effect: {{.}}</li>{{end}}
{{range .Result.Answers}}<li class="answer">answer: {{.}}</li>{{end}}
{{range .Result.Notes}}<li class="note">note: {{.}}</li>{{end}}
</ul>{{end}}
<details><summary>Counters (<code>oncepay_idempotency*</code>)</summary>
{{if .Result.MetricsNote}}<p>{{.Result.MetricsNote}}</p>{{else if .Metrics}}<table>{{range .Metrics}}<tr><td class="mono">{{.Series}}</td><td class="mono">{{.Delta}}</td></tr>{{end}}</table>{{else}}<p>No counter moved.</p>{{end}}
</details>
</article>
{{end}}
<section class="card" aria-labelledby="whole-h">
<h2 id="whole-h">Counters over the whole run</h2>
{{if .Report.MetricsNote}}<p>{{.Report.MetricsNote}}</p>{{else if .RunMetrics}}<table class="summary">{{range .RunMetrics}}<tr><td class="mono">{{.Series}}</td><td class="mono">{{.Delta}}</td></tr>{{end}}</table>{{else}}<p>No counter moved.</p>{{end}}
</section>
</main>
<footer>Written by <code>tools/cmd/drill --html</code>. Verdicts: <strong>held</strong> and <strong>VIOLATED</strong> for oncepay, <strong>REPRODUCED</strong> and <strong>not reproduced</strong> for the lab's naive replicas, where the incident is meant to happen.</footer>
</body>
</html>
`))

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
