package chaos

import (
	"fmt"
	"html/template"
	"os"
	"sort"
	"strings"
)

// bucket is one second of the run on the report's timeline.
type bucket struct {
	OK, Refused, Retry, Failed int
}

// band is a fault on the timeline: from its start to its healing.
type band struct {
	Kind       string
	From, To   float64 // seconds
	Detail     string
	X, W, Line int
}

// writeReport writes the run as one self-contained HTML page: the verdict, the checks, a
// timeline of answers per second with the faults drawn over it, and the violations.
func writeReport(path string, s summary, events []*event) error {
	var buckets []bucket
	var bands []band
	open := map[string]int{}
	for _, e := range events {
		sec := int(e.AtMs / 1000)
		for len(buckets) <= sec {
			buckets = append(buckets, bucket{})
		}
		switch e.Kind {
		case kindHTTP:
			b := &buckets[sec]
			switch {
			case e.Err != "" || e.Status >= 500 && e.Status != 503:
				b.Failed++
			case e.Status == 503 || e.Outcome == "in_progress":
				b.Retry++
			case e.Status >= 400:
				b.Refused++
			default:
				b.OK++
			}
		case kindFault:
			if kind, ok := strings.CutSuffix(e.Op, "_healed"); ok {
				if i, ok := open[kind]; ok {
					bands[i].To = e.AtMs / 1000
					delete(open, kind)
				}
				continue
			}
			bands = append(bands, band{Kind: e.Op, From: e.AtMs / 1000, To: e.AtMs/1000 + 0.5, Detail: e.Detail})
			if e.Op != faultRedeliver {
				open[e.Op] = len(bands) - 1
			}
		}
	}
	for _, i := range open { // a standing fault, or one the run ended in: to the end
		bands[i].To = float64(len(buckets))
	}
	const width, height, barTop = 1100, 160, 40
	peak := 1
	for _, b := range buckets {
		peak = max(peak, b.OK+b.Refused+b.Retry+b.Failed)
	}
	var bars strings.Builder
	bw := max(1, width/max(1, len(buckets)))
	for i, b := range buckets {
		y := barTop + height
		for _, part := range []struct {
			n     int
			class string
		}{{b.OK, "ok"}, {b.Refused, "refused"}, {b.Retry, "retry"}, {b.Failed, "failed"}} {
			h := part.n * height / peak
			y -= h
			if h > 0 {
				fmt.Fprintf(&bars, `<rect class="%s" x="%d" y="%d" width="%d" height="%d"/>`, part.class, i*bw, y, max(1, bw-1), h)
			}
		}
	}
	lines := map[string]int{}
	for i := range bands {
		b := &bands[i]
		if _, ok := lines[b.Kind]; !ok {
			lines[b.Kind] = len(lines)
		}
		b.Line = lines[b.Kind]
		b.X = int(b.From) * bw
		b.W = max(3, int((b.To-b.From)*float64(bw)))
	}
	var labels strings.Builder
	for kind, line := range lines {
		fmt.Fprintf(&labels, `<text x="%d" y="%d">%s</text>`, len(buckets)*bw+6, barTop+height+14+line*14+9, template.HTMLEscapeString(kind))
	}
	checks := append([]checkResult(nil), s.Checks...)
	sort.SliceStable(checks, func(i, j int) bool { return checks[i].Violations > checks[j].Violations })
	data := map[string]any{
		"S": s, "Checks": checks, "Bars": template.HTML(bars.String() + labels.String()), "Bands": bands,
		"Width": len(buckets)*bw + 140, "Height": barTop + height + 20 + 14*len(lines), "Base": barTop + height + 14,
		"Pass": s.Total == 0, "Peak": peak,
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return reportTmpl.Execute(f, data)
}

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"add": func(a, b int) int { return a + b },
	"mul": func(a, b int) int { return a * b },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>oncepay chaos run — {{.S.Mode}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1160px;color:#222}
h1{font-size:22px} .pass{color:#1a7f37} .fail{color:#c62828}
table{border-collapse:collapse;margin:1em 0} td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f6f6} td.n{text-align:right;font-variant-numeric:tabular-nums}
svg{border:1px solid #eee;background:#fcfcfc} svg text{font-size:10px;fill:#555}
rect.ok{fill:#4caf50} rect.refused{fill:#90a4ae} rect.retry{fill:#ffb300} rect.failed{fill:#e53935}
rect.band{fill:#7e57c2;fill-opacity:.75} .legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:-2px}
code{font-size:12px}
</style></head><body>
<h1>oncepay chaos run ({{.S.Mode}}{{if .S.RedisCluster}}, Redis Cluster{{end}}):
{{if .Pass}}<span class="pass">0 violations</span>{{else}}<span class="fail">{{.S.Total}} violations</span>{{end}}</h1>
<p>{{.S.Deliveries}} deliveries in {{printf "%.0f" .S.Seconds}} s of traffic by 3 oncepay processes on one private MariaDB, Redis and Kafka;
settled in {{printf "%.0f" .S.SettleSecs}} s. Channel trades paid: {{.S.ChannelPaid}}; channel refunds: {{.S.Refunds}}.</p>
<table><tr><th>fault</th><th>injected</th></tr>{{range $k, $v := .S.Faults}}<tr><td>{{$k}}</td><td class="n">{{$v}}</td></tr>{{end}}</table>
<h2>Checks</h2>
<table><tr><th>check</th><th>invariant</th><th>checked</th><th>violations</th></tr>
{{range .Checks}}<tr><td>{{.Name}}</td><td>{{.Invariant}}</td><td class="n">{{.Checked}}</td><td class="n {{if .Violations}}fail{{else}}pass{{end}}">{{.Violations}}</td></tr>{{end}}
</table>
<h2>Timeline</h2>
<p class="legend">answers per second (peak {{.Peak}}):<span style="background:#4caf50"></span>2xx
<span style="background:#90a4ae"></span>4xx final<span style="background:#ffb300"></span>503 / 409 in progress (retried)
<span style="background:#e53935"></span>no answer or 5xx<span style="background:#7e57c2"></span>fault (hover for detail)</p>
<svg width="{{.Width}}" height="{{.Height}}" xmlns="http://www.w3.org/2000/svg">{{.Bars}}
{{range .Bands}}<rect class="band" x="{{.X}}" y="{{add $.Base (mul .Line 14)}}" width="{{.W}}" height="10"><title>{{.Kind}} {{printf "%.1f" .From}}–{{printf "%.1f" .To}} s: {{.Detail}}</title></rect>{{end}}
</svg>
<h2>Deliveries</h2>
<table><tr><th>operation</th><th>deliveries</th></tr>{{range $k, $v := .S.ByOp}}<tr><td>{{$k}}</td><td class="n">{{$v}}</td></tr>{{end}}</table>
<table><tr><th>answer</th><th>count</th></tr>{{range $k, $v := .S.ByStatus}}<tr><td>{{$k}}</td><td class="n">{{$v}}</td></tr>{{end}}</table>
<table><tr><th>Idempotency-Outcome</th><th>count</th></tr>{{range $k, $v := .S.ByOutcome}}<tr><td>{{$k}}</td><td class="n">{{$v}}</td></tr>{{end}}</table>
<table><tr><th>orders by status</th><th>count</th></tr>{{range $k, $v := .S.Orders}}<tr><td>{{$k}}</td><td class="n">{{$v}}</td></tr>{{end}}</table>
{{if .S.Violations}}<h2 class="fail">Violations</h2><table><tr><th>check</th><th>detail</th></tr>
{{range .S.Violations}}<tr><td>{{.Check}}</td><td><code>{{.Detail}}</code></td></tr>{{end}}</table>{{end}}
<p>The full history is <code>history.jsonl</code> beside this page: one JSON object per request, answer, Kafka message and fault.</p>
</body></html>
`))
