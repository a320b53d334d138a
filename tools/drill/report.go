package drill

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// verdict is a scenario's outcome as a person reads it.
type verdict string

// The verdicts. oncepay rows read held or VIOLATED; lab rows, where the incident is meant to
// happen, read REPRODUCED or not reproduced.
const (
	verdictHeld          verdict = "held"
	verdictViolated      verdict = "VIOLATED"
	verdictReproduced    verdict = "REPRODUCED"
	verdictNotReproduced verdict = "not reproduced"
	verdictSkipped       verdict = "skipped"
	verdictError         verdict = "error"
)

// result is one scenario run against one target. Its JSON form is the --json output, which
// carries everything the HTML report draws, so field names are part of the drill's interface.
type result struct {
	ID      string  `json:"id"`
	Name    string  `json:"name"`
	Target  string  `json:"target"`
	Verdict verdict `json:"verdict"`
	// Summary is the one line printed in the verdict table.
	Summary  string `json:"summary"`
	Expected string `json:"expected"`
	Observed string `json:"observed"`
	// Effect lists where the business effect differed from exactly once.
	Effect []string `json:"effect_findings"`
	// Answers lists answers the contract does not allow.
	Answers []string `json:"answer_findings"`
	Notes   []string `json:"notes"`
	// Copies are the duplicates fired, with their timing, in firing order.
	Copies []copyRecord `json:"copies"`
	// Metrics are the deltas of the oncepay_idempotency* counters over the run.
	Metrics     map[string]float64 `json:"metrics_delta"`
	MetricsNote string             `json:"metrics_note,omitempty"`
	StartedAt   time.Time          `json:"started_at"`
	DurationMS  float64            `json:"duration_ms"`
	// Error is why the scenario could not be run to a verdict.
	Error string `json:"error,omitempty"`
}

// report is a whole drill run.
type report struct {
	URL        string          `json:"url"`
	RunID      string          `json:"run_id"`
	Kafka      []string        `json:"kafka_brokers"`
	Lab        bool            `json:"lab"`
	StartedAt  time.Time       `json:"started_at"`
	FinishedAt time.Time       `json:"finished_at"`
	Results    []result        `json:"results"`
	Totals     map[verdict]int `json:"totals"`
	// Metrics are the deltas of the oncepay_idempotency* counters over the whole run: with the
	// scenarios running at the same time, only this total is attributable.
	Metrics     map[string]float64 `json:"metrics_delta"`
	MetricsNote string             `json:"metrics_note,omitempty"`
	// ExitCode is the drill's exit status: 0 held, 1 a violation, 2 a scenario could not run.
	ExitCode int `json:"exit_code"`
}

// newReport starts the report of a run by d.
func newReport(d *drill) report {
	return report{URL: d.cfg.URL, RunID: d.runID, Kafka: d.cfg.Kafka, Lab: d.lab, StartedAt: time.Now().UTC()}
}

// finish stamps the end, counts the verdicts and decides the exit status. A violation wins
// over an error: a server that broke a guarantee is broken, whatever else could not run.
func (r *report) finish() {
	r.FinishedAt = time.Now().UTC()
	r.Totals = map[verdict]int{}
	for i := range r.Results {
		r.Results[i].normalize()
		r.Totals[r.Results[i].Verdict]++
	}
	switch {
	case r.Totals[verdictViolated] > 0:
		r.ExitCode = exitViolation
	case r.Totals[verdictError] > 0:
		r.ExitCode = exitTrouble
	default:
		r.ExitCode = exitOK
	}
	if r.Kafka == nil {
		r.Kafka = []string{}
	}
	if r.Metrics == nil {
		r.Metrics = map[string]float64{}
	}
}

// normalize makes empty lists print as [] rather than null, so JSON readers see one shape.
func (r *result) normalize() {
	for _, l := range []*[]string{&r.Effect, &r.Answers, &r.Notes} {
		if *l == nil {
			*l = []string{}
		}
	}
	if r.Copies == nil {
		r.Copies = []copyRecord{}
	}
	if r.Metrics == nil {
		r.Metrics = map[string]float64{}
	}
}

// writeJSON prints the report as one indented JSON document.
func writeJSON(w io.Writer, r report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeTable prints, for people, the details of every run and then the verdict table.
func writeTable(w io.Writer, r report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, res := range r.Results {
		writeDetails(tw, res)
	}
	if len(r.Metrics) > 0 || r.MetricsNote != "" {
		fmt.Fprintln(tw, "whole run")
		writeMetrics(tw, r.Metrics, r.MetricsNote)
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "oncepay drill %s against %s (kafka: %s, lab: %t)\n\n", r.RunID, r.URL, orNone(strings.Join(r.Kafka, ",")), r.Lab)
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t(%s)\n", res.ID, res.Name, res.Target, res.Verdict, fmtMS(res.DurationMS), oneLine(res.Summary))
	}
	fmt.Fprintf(tw, "\n%s; exit status %d; the drill took %s\n", totalsLine(r.Totals), r.ExitCode, fmtMS(ms(r.FinishedAt.Sub(r.StartedAt))))
	return tw.Flush()
}

// writeDetails prints one run: who fired what, who answered, expected against observed.
func writeDetails(w io.Writer, r result) {
	fmt.Fprintf(w, "%s %s, %s: %s\n", r.ID, r.Name, r.Target, r.Verdict)
	if r.Error != "" {
		fmt.Fprintf(w, "  error     %s\n", oneLine(r.Error))
	}
	if len(r.Copies) > 0 {
		fmt.Fprintf(w, "  fired     %s\n", firedLine(r.Copies))
		for i, g := range groupCopies(r.Copies) {
			label := "answers"
			if i > 0 {
				label = ""
			}
			fmt.Fprintf(w, "  %-9s %s\t%s\t%s\t%s\t×%d\t%s\n", label, g.path, g.via, g.status, g.layer, g.n, g.timing)
		}
	}
	for _, line := range []struct{ label, text string }{{"expected", r.Expected}, {"observed", r.Observed}} {
		if line.text != "" {
			fmt.Fprintf(w, "  %-9s %s\n", line.label, oneLine(line.text))
		}
	}
	for _, f := range r.Effect {
		fmt.Fprintf(w, "  %-9s %s\n", "effect!", oneLine(f))
	}
	for _, f := range r.Answers {
		fmt.Fprintf(w, "  %-9s %s\n", "answer!", oneLine(f))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  %-9s %s\n", "note", oneLine(n))
	}
	writeMetrics(w, r.Metrics, r.MetricsNote)
	fmt.Fprintln(w)
}

// writeMetrics prints counter deltas, sorted by series, or the note on why there are none.
func writeMetrics(w io.Writer, metrics map[string]float64, note string) {
	switch {
	case note != "":
		fmt.Fprintf(w, "  %-9s %s\n", "metrics", note)
		return
	case len(metrics) == 0:
		fmt.Fprintf(w, "  %-9s no %s* counter moved\n", "metrics", counterPrefix)
		return
	}
	series := make([]string, 0, len(metrics))
	for s := range metrics {
		series = append(series, s)
	}
	sort.Strings(series)
	for i, s := range series {
		label := "metrics"
		if i > 0 {
			label = ""
		}
		fmt.Fprintf(w, "  %-9s %s\t%+g\n", label, s, metrics[s])
	}
}

// firedLine says how many copies went by which transport, and over what time span.
func firedLine(copies []copyRecord) string {
	var nHTTP, nKafka int
	var last float64
	for _, c := range copies {
		if c.Via == "kafka" {
			nKafka++
		} else {
			nHTTP++
		}
		last = max(last, c.StartMS)
	}
	parts := []string{}
	if nHTTP > 0 {
		parts = append(parts, fmt.Sprintf("%d over HTTP", nHTTP))
	}
	if nKafka > 0 {
		parts = append(parts, fmt.Sprintf("%d over Kafka", nKafka))
	}
	return fmt.Sprintf("%d %s (%s), the last %s after the first", len(copies), plural(len(copies), "copy", "copies"),
		strings.Join(parts, ", "), fmtMS(last))
}

// copyGroup is the copies that came by one path and got one answer.
type copyGroup struct {
	path, via, status, layer, timing string
	n                                int
	minMS, maxMS                     float64
	// handledMS is, for Kafka copies, the longest from publication to the consumer group's
	// commit past the copy; unconfirmed counts the copies whose commit was not seen.
	handledMS   float64
	unconfirmed int
}

// groupCopies groups copies by path and answer, in order of first appearance, so twenty
// identical answers print as one line.
func groupCopies(copies []copyRecord) []copyGroup {
	var groups []copyGroup
	index := map[string]int{}
	for _, c := range copies {
		g := copyGroup{path: c.Path, via: c.Via, status: statusText(c), layer: layerText(c)}
		k := strings.Join([]string{g.path, g.via, g.status, g.layer}, "\x00")
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			g.minMS, g.maxMS = c.DurationMS, c.DurationMS
			groups = append(groups, g)
		}
		groups[i].n++
		groups[i].minMS = min(groups[i].minMS, c.DurationMS)
		groups[i].maxMS = max(groups[i].maxMS, c.DurationMS)
		if c.Via == "kafka" && c.Error == "" {
			if c.ConsumedMS > 0 {
				groups[i].handledMS = max(groups[i].handledMS, c.ConsumedMS-c.StartMS)
			} else {
				groups[i].unconfirmed++
			}
		}
	}
	for i := range groups {
		g := &groups[i]
		g.timing = "in " + fmtMS(g.maxMS)
		if g.n > 1 && fmtMS(g.minMS) != fmtMS(g.maxMS) {
			g.timing = "in " + fmtMS(g.minMS) + "–" + fmtMS(g.maxMS)
		}
		switch {
		case g.via != "kafka" || g.status == "no answer":
		case g.unconfirmed > 0:
			g.timing += ", handling not confirmed"
		case g.handledMS > 0:
			g.timing += ", handled within " + fmtMS(g.handledMS)
		}
	}
	return groups
}

// statusText is the status and problem code of a copy, e.g. "409 idempotency_key_in_use".
func statusText(c copyRecord) string {
	switch {
	case c.Error != "":
		return "no answer"
	case c.Via == "kafka":
		return "published"
	case c.Via == viaSetup:
		return "done"
	}
	return strings.TrimSpace(strconv.Itoa(c.Status) + " " + c.Code)
}

// layerText names the layer that answered, from Idempotency-Outcome and Idempotent-Replayed.
func layerText(c copyRecord) string {
	switch {
	case c.Error != "":
		return oneLine(c.Error)
	case c.Via == "kafka":
		return "consumer (not observable)"
	case c.Outcome == "":
		return "-"
	case c.Replayed && c.Outcome != "replayed":
		return c.Outcome + " (Idempotent-Replayed)"
	}
	return c.Outcome
}

// verdictOrder is the order verdict counts are printed in.
var verdictOrder = []verdict{verdictHeld, verdictViolated, verdictReproduced, verdictNotReproduced, verdictSkipped, verdictError}

// totalsLine prints the verdict counts, e.g. "7 held, 1 VIOLATED".
func totalsLine(t map[verdict]int) string {
	var parts []string
	for _, v := range verdictOrder {
		if t[v] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", t[v], v))
		}
	}
	return orNone(strings.Join(parts, ", "))
}

// fmtMS prints milliseconds for people: "12ms", "1.5s".
func fmtMS(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'f', 1, 64) + "s"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + "ms"
}

// oneLine keeps a text on one table line: tabs and newlines would break the columns.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
