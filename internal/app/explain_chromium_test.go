//go:build unix

package app_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/oncepay/oncepay/internal/testsupport/apptest"
	"github.com/oncepay/oncepay/internal/testsupport/testenv"
)

// TestExplainPageInChromium renders the explanation of a whole history in headless Chromium
// with JavaScript disabled, the admin key sent as the Authorization header the way an
// operator's browser or proxy adds it: the timeline shows a row for every layer, with the
// order's, the trade's and the refund's ids, and the page ran no script. Without the header
// the page is refused; the key is never in its URL or its forms.
func TestExplainPageInChromium(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing but CI=true: CI must install it (apt-get install -y chromium)", chromiumPath)
		}
		t.Skipf("%s is not installed (apt-get install -y chromium); CI runs this test", chromiumPath)
	}
	s := explainServer(t, testenv.DB(t))
	w := makeExplainedWrite(t, s)
	pageURL := s.URL + "/v1/admin/explain/page?" + url.Values{"order": {w.order.OrderID}}.Encode()

	page := openInChromium(t, "about:blank")
	runIn(t, page, "send the admin key, turn JavaScript off", chromedp.Steps(
		command(network.Enable, network.EnableParams{}),
		command(network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + apptest.AdminKey}}),
		command(emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}),
	))
	runIn(t, page, "open the page", chromedp.Navigate(pageURL))
	html := runIn(t, page, "read the DOM", documentHTML)

	rows := strings.Count(html, `<tr class="`)
	for _, layer := range []string{"idempotency", "order", "outbox", "webhook", "channel", "ledger"} {
		if !strings.Contains(html, `data-layer="`+layer+`"`) {
			t.Errorf("the timeline has no %s row (%d rows)", layer, rows)
		}
	}
	for what, id := range map[string]string{"order": w.order.OrderID, "trade": w.trade.TradeNo, "refund": w.refund.OutRefundNo, "key": w.token} {
		if !strings.Contains(html, id) {
			t.Errorf("the page does not show the %s %s", what, id)
		}
	}
	if strings.Contains(html, apptest.AdminKey) {
		t.Errorf("the page shows the admin key")
	}
	if !strings.Contains(html, `id="subject"`) || !strings.Contains(html, "order "+w.order.OrderID) {
		t.Errorf("the page names no subject")
	}
	if errs := page.exceptions(); len(errs) > 0 {
		t.Errorf("the page threw: %v", errs)
	}
	shot := runIn(t, page, "screenshot", chromedp.FullScreenshot(80))
	if len(shot) < 1000 {
		t.Errorf("a screenshot of %d bytes", len(shot))
	}
	if dir := os.Getenv("ONCEPAY_EXPLAIN_SCREENSHOT_DIR"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "explain.jpg"), shot, 0o644); err != nil {
			t.Error(err)
		}
	}
	t.Logf("the page's timeline: %d rows", rows)

	// Without the header, the same URL is refused: 401 problem+json, nothing of the write.
	runIn(t, page, "drop the admin key", command(network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{}}))
	runIn(t, page, "open the page again", chromedp.Navigate(pageURL))
	body := runIn(t, page, "read the refusal", documentHTML)
	if !strings.Contains(body, "unauthorized") || strings.Contains(body, w.trade.TradeNo) {
		t.Errorf("without the admin key the page answered %q", body)
	}
}

// command is the action that sends the DevTools protocol command cmd with params.
func command[P any](cmd cdp.Command[P, cdp.Empty], params P) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, cmd, params)
		return chromedp.Void{}, err
	}
}

// documentHTML reads the rendered document's markup through the DOM domain, which needs no
// script in the page (the test turns scripts off).
func documentHTML(ctx context.Context, t *chromedp.Target) (string, error) {
	doc, err := cdp.Call(ctx, t, dom.GetDocument, dom.GetDocumentParams{})
	if err != nil {
		return "", err
	}
	res, err := cdp.Call(ctx, t, dom.GetOuterHTML, dom.GetOuterHTMLParams{BackendNodeID: doc.Root.BackendNodeID})
	return res.OuterHTML, err
}
