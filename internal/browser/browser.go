// Package browser drives a headless Chromium for the dashboard's tests:
// Debian's /usr/bin/chromium over the DevTools protocol (chromedp), with a
// fresh profile and no network of its own.
package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
)

// Path finds Chromium: $DISTFLOW_CHROMIUM, /usr/bin/chromium or chromium
// on $PATH; "" when there is none.
func Path() string {
	for _, p := range []string{os.Getenv("DISTFLOW_CHROMIUM"), "/usr/bin/chromium"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	return ""
}

// Start starts a headless Chromium for t (skipping t when there is none)
// and returns a context for chromedp actions; the browser stops when t
// ends.
func Start(t testing.TB, width, height int) context.Context {
	t.Helper()
	path := Path()
	if path == "" {
		t.Skip("no chromium: install Debian's chromium (apt-get install -y chromium; .ci/run does) or set DISTFLOW_CHROMIUM")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(width, height),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	// Start the browser now, so that its start-up is not counted in the
	// first action's deadline. (Not with a deadline of its own: the first
	// action's context is the browser's, and ending it stops the browser.)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// ScreenshotDir is where a test writes its screenshots:
// $DISTFLOW_SCREENSHOTS/<test name> if set, else a directory under
// t.TempDir. The test logs it.
func ScreenshotDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if base := os.Getenv("DISTFLOW_SCREENSHOTS"); base != "" {
		dir = filepath.Join(base, filepath.Base(t.Name()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// Screenshot writes the whole page as dir/name.png.
func Screenshot(ctx context.Context, dir, name string) (string, error) {
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		return "", fmt.Errorf("screenshot %s: %w", name, err)
	}
	p := filepath.Join(dir, name+".png")
	return p, os.WriteFile(p, buf, 0o644)
}
