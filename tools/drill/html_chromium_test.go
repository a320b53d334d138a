package drill

import (
	"context"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// chromium is where Debian's chromium package puts the browser; CI installs it.
const chromium = "/usr/bin/chromium"

// envKeepScreenshot names a file to copy the screenshot to, to look at it or keep it as a CI
// artifact; the test's own copy goes with its temporary directory.
const envKeepScreenshot = "ONCEPAY_DRILL_SCREENSHOT"

// TestHTMLReportRendersInChromium opens the report of a fixed run in headless Chromium and
// checks the screenshot: a page that failed to render (a template error, a broken SVG, CSS
// that hides everything) is blank or nearly so, while the real one shows the legend, the
// verdict badges and the first timelines in the palette's colours.
func TestHTMLReportRendersInChromium(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing but CI=true: CI must install it (apt-get install -y chromium)", chromium)
		}
		t.Skipf("%s is not installed (apt-get install -y chromium); CI runs this test", chromium)
	}
	dir := t.TempDir()
	page, shot := filepath.Join(dir, "report.html"), filepath.Join(dir, "report.png")
	if err := writeHTMLFile(page, htmlFixture()); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--screenshot="+shot, "--window-size=1200,1600",
		"file://"+page)
	cmd.Env = append(os.Environ(), "HOME="+dir) // nothing of the user's profile is read or written
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	t.Logf("chromium took %s", time.Since(start).Round(time.Millisecond))

	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("chromium wrote no screenshot: %v\n%s", err, out)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if keep := os.Getenv(envKeepScreenshot); keep != "" {
		if b, err := os.ReadFile(shot); err == nil {
			_ = os.WriteFile(keep, b, 0o644)
		}
	}

	b := img.Bounds()
	if b.Dx() != 1200 || b.Dy() != 1600 {
		t.Errorf("screenshot is %dx%d, want the 1200x1600 window", b.Dx(), b.Dy())
	}
	distinct := map[color.RGBA]bool{}
	nonWhite := 0
	palette := map[string]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			distinct[c] = true
			if c.R < 240 || c.G < 240 || c.B < 240 {
				nonWhite++
			}
			for _, cat := range categories {
				if near(c, cat.Color) {
					palette[cat.Key]++
				}
			}
		}
	}
	share := float64(nonWhite) / float64(b.Dx()*b.Dy())
	t.Logf("%d distinct colours, %.1f%% of the pixels not white, palette pixels %v", len(distinct), 100*share, palette)
	if len(distinct) < 64 {
		t.Errorf("only %d distinct colours: the page looks blank", len(distinct))
	}
	if share < 0.05 {
		t.Errorf("only %.1f%% of the pixels are not white: the page looks blank", 100*share)
	}
	// The legend's swatches and the first run's bars: executed (blue) and in_progress (orange)
	// fill whole bars, so hundreds of their pixels carry the exact colour. A refusal has its own
	// colour, which at least the legend shows.
	for _, key := range []string{"executed", "in_progress", "replayed", "state_rejected", "refused"} {
		if palette[key] < 100 {
			t.Errorf("%d pixels of %s's colour: the legend or the timelines did not render", palette[key], key)
		}
	}
}

// near reports whether c is within a small distance of the colour hex ("#RRGGBB").
func near(c color.RGBA, hex string) bool {
	v, err := strconv.ParseUint(hex[1:], 16, 32)
	if err != nil {
		return false
	}
	r, g, b := int(v>>16), int(v>>8&0xff), int(v&0xff)
	d := func(a uint8, b int) int { return max(int(a)-b, b-int(a)) }
	return d(c.R, r) <= 3 && d(c.G, g) <= 3 && d(c.B, b) <= 3
}
