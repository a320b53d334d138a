package explain

import (
	"bytes"
	"encoding/json"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"

	"github.com/oncepay/oncepay/internal/platform/web"
)

// pageTemplate is the operator's page of an explanation: the timeline as one table, a row per
// entry marked with its layer, then each layer's section as the JSON API answers it. It is
// plain HTML — no script, no external asset — so that it works with JavaScript off and under
// the strict Content-Security-Policy pageHeaders sets. Its forms ask for another explanation
// with GET, one form per handle.
var pageTemplate = template.Must(template.New("explain").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>oncepay — explain{{with .Handle}} {{.Kind}} {{.Value}}{{end}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #222; }
form { display: inline-block; margin: 0 1rem .5rem 0; }
input { font-family: ui-monospace, monospace; }
table { border-collapse: collapse; width: 100%; font-size: .85rem; }
th, td { border-bottom: 1px solid #ddd; padding: .25rem .4rem; text-align: left; vertical-align: top; }
td.at, td.ids { font-family: ui-monospace, monospace; white-space: nowrap; }
.layer { font-weight: 600; }
tr.idempotency .layer { color: #6a3d9a; } tr.order .layer, tr.recharge .layer { color: #1f78b4; }
tr.outbox .layer { color: #b15928; } tr.webhook .layer { color: #33a02c; }
tr.channel .layer { color: #e31a1c; } tr.ledger .layer { color: #555; }
pre { background: #f6f6f6; padding: .5rem; overflow-x: auto; font-size: .8rem; }
.problem { color: #c4281c; }
.muted { color: #666; }
</style>
</head>
<body>
<h1>Explain a write</h1>
<div>
<form method="get"><label>key <input name="key" size="24" required></label> <label>user_id <input name="user_id" size="20" required></label> <button>explain</button></form>
<form method="get"><label>order <input name="order" size="20" required></label> <button>explain</button></form>
<form method="get"><label>trade <input name="trade" size="24" required></label> <label>channel <input name="channel" size="8"></label> <button>explain</button></form>
<form method="get"><label>refund <input name="refund" size="24" required></label> <button>explain</button></form>
</div>
{{with .Problem}}<p class="problem" id="problem">{{.Status}} {{.Code}}: {{.Detail}}</p>{{end}}
{{with .X}}
<h2 id="subject">{{.Handle.Kind}} {{.Handle.Value}} → {{if .Subject.Kind}}{{.Subject.Kind}} {{.Subject.ID}}{{else}}no order or recharge{{end}}</h2>
{{if .Truncated}}<p class="problem" id="truncated">Sections cut at {{.Limit}} rows: {{range .Truncated}}{{.}} {{end}}</p>{{end}}
<h2>Timeline</h2>
<table id="timeline">
<thead><tr><th>at (UTC)</th><th>layer</th><th>what</th><th>ids</th></tr></thead>
<tbody>
{{range .Timeline}}<tr class="{{.Layer}}" data-layer="{{.Layer}}"><td class="at">{{.At.Format "2006-01-02 15:04:05.000000"}}</td><td class="layer">{{.Layer}}</td><td>{{.What}}</td><td class="ids">{{range $k, $v := .IDs}}{{$k}}={{$v}} {{end}}</td></tr>
{{else}}<tr><td colspan="4" class="muted">nothing with a time</td></tr>
{{end}}</tbody>
</table>
{{end}}
{{range .Sections}}<section id="section-{{.Name}}"><h2>{{.Name}}</h2><pre>{{.JSON}}</pre></section>
{{end}}
<p class="muted">The same explanation as JSON: GET /v1/admin/explain with the same query and the admin key.</p>
</body>
</html>
`))

// pageData is what the page shows: an explanation with its sections, or a problem.
type pageData struct {
	Handle   *Handle
	X        *Explanation
	Problem  *web.Problem
	Sections []pageSection
}

// pageSection is one layer's section, as indented JSON.
type pageSection struct {
	Name string
	JSON string
}

// Page serves GET /v1/admin/explain/page: the explanation of the handle the query names as an
// HTML page, or the page's forms alone when the query names nothing. It is an admin route like
// the JSON one — the admin key in the Authorization header — so an operator opens it through
// a browser or a proxy that adds the header: the key is never in a URL, a link or a form.
// Empty form fields are ignored, so that the forms' blank optional inputs do not count.
func (e *Explainer) Page(w http.ResponseWriter, r *http.Request) {
	q := url.Values{}
	for name, values := range r.URL.Query() {
		for _, v := range values {
			if v != "" {
				q.Add(name, v)
			}
		}
	}
	var d pageData
	status := http.StatusOK
	if len(q) > 0 {
		h, err := ParseHandle(q)
		var x *Explanation
		if err == nil {
			d.Handle = &h
			x, err = e.Explain(r.Context(), h)
		}
		if err != nil {
			p := web.ProblemFor(r, err)
			if p.Status >= http.StatusInternalServerError {
				slog.ErrorContext(r.Context(), "explain page", "err", err)
			}
			d.Problem, status = &p, p.Status
		} else {
			d.X, d.Sections = x, sectionsOf(x)
		}
	}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, d); err != nil {
		web.WriteError(w, r, err)
		return
	}
	pageHeaders(w.Header())
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// pageHeaders are the page's headers: HTML, never cached (it holds a user's data), never
// framed, no script and no request to anywhere but this origin's forms.
func pageHeaders(h http.Header) {
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// sectionsOf lays out each layer's section of x.
func sectionsOf(x *Explanation) []pageSection {
	parts := []struct {
		name string
		v    any
	}{
		{LayerIdempotency, x.Idempotency}, {LayerOrder, x.Order}, {LayerRecharge, x.Recharge}, {LayerOutbox, x.Outbox},
		{LayerWebhook, x.Events}, {LayerChannel, x.Channel}, {LayerLedger, x.Ledger},
	}
	var out []pageSection
	for _, p := range parts {
		if p.name == LayerOrder && x.Order == nil || p.name == LayerRecharge && x.Recharge == nil {
			continue
		}
		b, err := json.MarshalIndent(p.v, "", "  ")
		if err != nil {
			b = []byte(err.Error())
		}
		out = append(out, pageSection{Name: p.name, JSON: string(b)})
	}
	return out
}
