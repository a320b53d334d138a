package channelsim

import (
	"bytes"
	"fmt"
	"html/template"
	"net/http"

	"github.com/go-chi/chi/v5"
)

// cashierTemplate is the cashier page: self-contained (no external asset), it shows the trade,
// pays it with a fetch to ../trades/{out_trade_no}/pay and then polls ../trades/{out_trade_no}
// to show the notification attempts as they happen. The paths are relative, so the page works
// wherever the simulator is mounted.
var cashierTemplate = template.Must(template.New("cashier").Funcs(template.FuncMap{"yuan": yuan}).Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Channel}} cashier — {{.OutTradeNo}}</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 46rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
.amount { font-size: 2.5rem; font-weight: 600; margin: .5rem 0; }
.muted { color: #666; font-size: .9rem; }
button { font-size: 1.1rem; padding: .6rem 2.4rem; border: 0; border-radius: .4rem; background: #1677ff; color: #fff; cursor: pointer; }
button:disabled { background: #aaa; cursor: default; }
table { border-collapse: collapse; width: 100%; margin-top: 1rem; font-size: .85rem; }
th, td { border-bottom: 1px solid #ddd; padding: .3rem .4rem; text-align: left; vertical-align: top; }
.ok { color: #08872e; } .fail { color: #c4281c; }
#error { color: #c4281c; }
</style>
</head>
<body>
<p class="muted">{{.Channel}} — payment channel simulator</p>
<h1>{{.Subject}}</h1>
<div class="amount">{{yuan .Amount}}</div>
<p class="muted">out_trade_no {{.OutTradeNo}} · trade_no {{.TradeNo}} · status <b id="status">{{.Status}}</b></p>
<p><button id="pay"{{if ne .Status "WAIT_BUYER_PAY"}} disabled{{end}}>Pay</button> <span id="error"></span></p>
<h2>Notifications</h2>
<p class="muted" id="summary">none yet</p>
<table>
<thead><tr><th>id</th><th>round</th><th>copy</th><th>at</th><th>answer</th></tr></thead>
<tbody id="attempts"></tbody>
</table>
<script>
"use strict";
const tradeNo = {{.OutTradeNo}};
const base = "../trades/" + encodeURIComponent(tradeNo);
const payButton = document.getElementById("pay");
let paying = false;

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
}

function render(view) {
  document.getElementById("status").textContent = view.trade.status;
  payButton.disabled = paying || view.trade.status !== "WAIT_BUYER_PAY";
  const body = document.getElementById("attempts");
  body.replaceChildren();
  const summary = [];
  for (const n of view.notifications) {
    summary.push(n.id + " (" + n.kind + ") " + n.status + (n.next_at ? ", next at " + n.next_at : ""));
    for (const a of n.attempts) {
      const row = body.insertRow();
      cell(row, n.id);
      cell(row, a.round);
      cell(row, a.copy);
      cell(row, a.at);
      const answer = a.dropped ? "dropped" : (a.status ? a.status + " " : "") + (a.answer || a.error || "");
      cell(row, answer, a.success ? "ok" : "fail");
    }
  }
  document.getElementById("summary").textContent = summary.length ? summary.join("; ") : "none yet";
}

async function refresh() {
  try {
    const res = await fetch(base, {cache: "no-store"});
    if (res.ok) render(await res.json());
  } catch (e) {
    // The simulator may be restarting; the next poll tries again.
  }
}

payButton.addEventListener("click", async () => {
  paying = true;
  payButton.disabled = true;
  document.getElementById("error").textContent = "";
  try {
    const res = await fetch(base + "/pay", {method: "POST"});
    if (!res.ok) {
      const problem = await res.json().catch(() => ({}));
      document.getElementById("error").textContent = problem.detail || ("payment failed: " + res.status);
    }
  } catch (e) {
    document.getElementById("error").textContent = "payment failed: " + e;
  } finally {
    paying = false;
    await refresh();
  }
});

refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
`))

// cashierView is what the cashier page shows.
type cashierView struct {
	TradeRecord
	Channel string
}

// yuan formats cents as an amount in yuan: 1234 → "¥12.34".
func yuan(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s¥%d.%02d", sign, cents/100, cents%100)
}

// handleCashier serves GET /sim/cashier/{out_trade_no}.
func (s *Sim) handleCashier(w http.ResponseWriter, r *http.Request) {
	t, err := s.tradeRecord(chi.URLParam(r, "out_trade_no"))
	if err != nil {
		writeError(w, err)
		return
	}
	var page bytes.Buffer
	if err := cashierTemplate.Execute(&page, cashierView{TradeRecord: t, Channel: s.cfg.Channel}); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
	_, _ = w.Write(page.Bytes())
}
