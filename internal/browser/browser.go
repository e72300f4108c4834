// Package browser drives a real headless Chromium from Go tests (issue
// 31's page): the Chrome DevTools Protocol over --remote-debugging-pipe
// (NUL-separated JSON on fds 3 and 4), no dependency beyond the standard
// library. Only tests import it.
package browser

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Find is the Chromium binary: $ACP_CHROMIUM, else chromium or
// chromium-browser on PATH; "" when there is none.
func Find() string {
	if p := os.Getenv("ACP_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// Browser is one headless Chromium with a fresh profile.
type Browser struct {
	t    testing.TB
	cmd  *exec.Cmd
	in   io.WriteCloser
	mu   sync.Mutex
	next int
	wait map[int]chan reply
	// Events is every event received, in order (guarded by mu).
	events []Event
	dead   chan struct{}
}

type reply struct {
	Result json.RawMessage
	Err    error
}

// Event is one CDP event.
type Event struct {
	Method    string
	SessionID string
	Params    json.RawMessage
}

// Start launches Chromium (skipping the test when there is none) and ends
// it at cleanup.
func Start(t testing.TB) *Browser {
	t.Helper()
	if testing.Short() {
		// A browser costs seconds of CPU a test: -short (a contributor's
		// quick run) leaves it out, as it leaves out the real agents.
		t.Skip("-short: runs Chromium")
	}
	bin := Find()
	if bin == "" {
		t.Skip("no chromium on PATH (apt-get install chromium; .ci/run installs it)")
	}
	toChrome, chromeIn, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	chromeOut, fromChrome, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
		"--user-data-dir="+t.TempDir(), "--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{toChrome, fromChrome} // fds 3 and 4
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	toChrome.Close()
	fromChrome.Close()
	b := &Browser{t: t, cmd: cmd, in: chromeIn, wait: map[int]chan reply{}, dead: make(chan struct{})}
	go b.read(chromeOut)
	t.Cleanup(func() {
		b.call(context.Background(), "", "Browser.close", nil)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		chromeIn.Close()
		if t.Failed() {
			// Headless Chromium complains of the D-Bus it lacks: noise.
			var keep []string
			for l := range strings.Lines(stderr.String()) {
				if !strings.Contains(l, "dbus") {
					keep = append(keep, l)
				}
			}
			if s := strings.Join(keep, ""); s != "" {
				t.Logf("chromium stderr (tail): %s", s[max(0, len(s)-4000):])
			}
		}
	})
	return b
}

func (b *Browser) read(r io.ReadCloser) {
	defer close(b.dead)
	defer r.Close()
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			for id, ch := range b.wait {
				ch <- reply{Err: errors.New("browser: chromium ended")}
				delete(b.wait, id)
			}
			b.mu.Unlock()
			return
		}
		var m struct {
			ID        int             `json:"id"`
			Method    string          `json:"method"`
			SessionID string          `json:"sessionId"`
			Params    json.RawMessage `json:"params"`
			Result    json.RawMessage `json:"result"`
			Error     *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil {
			continue
		}
		b.mu.Lock()
		if m.Method != "" {
			b.events = append(b.events, Event{m.Method, m.SessionID, m.Params})
		} else if ch := b.wait[m.ID]; ch != nil {
			delete(b.wait, m.ID)
			r := reply{Result: m.Result}
			if m.Error != nil {
				r.Err = fmt.Errorf("browser: %s", m.Error.Message)
			}
			ch <- r
		}
		b.mu.Unlock()
	}
}

// call sends one CDP command (to a page's session when session is set).
func (b *Browser) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan reply, 1)
	b.wait[id] = ch
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	line, _ := json.Marshal(msg)
	_, err := b.in.Write(append(line, 0))
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case r := <-ch:
		return r.Result, r.Err
	case <-ctx.Done():
		return nil, fmt.Errorf("browser: %s: %w", method, ctx.Err())
	}
}

// Events returns the events received so far.
func (b *Browser) Events() []Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Event(nil), b.events...)
}

// Page is one tab.
type Page struct {
	b       *Browser
	t       testing.TB
	session string
}

// NewPage opens a tab width x height CSS pixels wide (a phone's 390, a
// desktop's 1280), with Runtime, Page, Network and Log events on.
func (b *Browser) NewPage(width, height int) *Page {
	b.t.Helper()
	ctx := context.Background()
	res, err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"})
	if err != nil {
		b.t.Fatal(err)
	}
	var tg struct {
		TargetID string `json:"targetId"`
	}
	json.Unmarshal(res, &tg)
	res, err = b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": tg.TargetID, "flatten": true})
	if err != nil {
		b.t.Fatal(err)
	}
	var at struct {
		SessionID string `json:"sessionId"`
	}
	json.Unmarshal(res, &at)
	p := &Page{b: b, t: b.t, session: at.SessionID}
	for _, m := range []string{"Runtime.enable", "Page.enable", "Network.enable", "Log.enable"} {
		p.Call(m, nil)
	}
	p.Resize(width, height)
	return p
}

// Call sends a CDP command to the page; failures fail the test.
func (p *Page) Call(method string, params any) json.RawMessage {
	p.t.Helper()
	res, err := p.b.call(context.Background(), p.session, method, params)
	if err != nil {
		p.t.Fatalf("%s: %v", method, err)
	}
	return res
}

// Resize sets the viewport (mobile when narrower than 600 px).
func (p *Page) Resize(width, height int) {
	p.t.Helper()
	p.Call("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height,
		"deviceScaleFactor": 1, "mobile": width < 600})
}

// Front brings the tab to the front: a background tab gets no animation
// frames, as in a desktop browser, so what a page renders per frame
// waits until it is shown.
func (p *Page) Front() {
	p.t.Helper()
	p.Call("Page.bringToFront", nil)
}

// Navigate loads url and waits for the document to be complete.
func (p *Page) Navigate(url string) {
	p.t.Helper()
	p.Call("Page.navigate", map[string]any{"url": url})
	p.WaitFor(`document.readyState === "complete"`, 15*time.Second)
}

// Eval evaluates a JavaScript expression (promises awaited) and decodes
// its value into out (nil: ignored).
func (p *Page) Eval(expr string, out any) error {
	res, err := p.b.call(context.Background(), p.session, "Runtime.evaluate", map[string]any{
		"expression": expr, "returnByValue": true, "awaitPromise": true})
	if err != nil {
		return err
	}
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return err
	}
	if r.Exception != nil {
		return fmt.Errorf("browser: %s: %s %s", expr, r.Exception.Text, r.Exception.Exception.Description)
	}
	if out != nil && len(r.Result.Value) > 0 {
		return json.Unmarshal(r.Result.Value, out)
	}
	return nil
}

// String evaluates expr to a string, failing the test on error.
func (p *Page) String(expr string) string {
	p.t.Helper()
	var s string
	if err := p.Eval(expr, &s); err != nil {
		p.t.Fatal(err)
	}
	return s
}

// WaitFor polls expr until it is truthy, failing the test after timeout.
func (p *Page) WaitFor(expr string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var ok bool
		err := p.Eval("!!("+expr+")", &ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("waited %v for %s (last error %v)", timeout, expr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Click presses the left mouse button on the centre of the first element
// matching selector, as a user would (real input events, after scrolling
// it into view).
func (p *Page) Click(selector string) {
	p.t.Helper()
	var pt struct{ X, Y float64 }
	sel, _ := json.Marshal(selector)
	expr := fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return null;
		e.scrollIntoView({block: "center"}); const r = e.getBoundingClientRect();
		return {X: r.left + r.width / 2, Y: r.top + r.height / 2}; })()`, sel)
	if err := p.Eval(expr, &pt); err != nil || pt.X == 0 && pt.Y == 0 {
		p.t.Fatalf("click %s: no such element (%v)", selector, err)
	}
	for _, typ := range []string{"mousePressed", "mouseReleased"} {
		p.Call("Input.dispatchMouseEvent", map[string]any{"type": typ, "x": pt.X, "y": pt.Y, "button": "left", "clickCount": 1})
	}
}

// Key presses one key (Enter, Tab, " ") with the keyboard.
func (p *Page) Key(key string) {
	p.t.Helper()
	code := map[string]int{"Enter": 13, "Tab": 9, " ": 32}[key]
	for _, typ := range []string{"rawKeyDown", "keyUp"} {
		params := map[string]any{"type": typ, "key": key, "windowsVirtualKeyCode": code}
		if key == "Enter" && typ == "rawKeyDown" {
			params["type"] = "keyDown"
			params["text"] = "\r"
		}
		p.Call("Input.dispatchKeyEvent", params)
	}
}

// Screenshot saves a PNG of the whole page to path.
func (p *Page) Screenshot(path string) {
	p.t.Helper()
	res := p.Call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true})
	var r struct {
		Data string `json:"data"`
	}
	json.Unmarshal(res, &r)
	b, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil || len(b) == 0 {
		p.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// Problems are the page's uncaught exceptions and console errors (a CSP
// violation is one) so far.
func (p *Page) Problems() []string {
	var out []string
	for _, e := range p.b.Events() {
		if e.SessionID != p.session {
			continue
		}
		switch e.Method {
		case "Runtime.exceptionThrown":
			out = append(out, "exception: "+string(e.Params))
		case "Log.entryAdded":
			var l struct {
				Entry struct {
					Level string `json:"level"`
					Text  string `json:"text"`
				} `json:"entry"`
			}
			json.Unmarshal(e.Params, &l)
			if l.Entry.Level == "error" {
				out = append(out, "console: "+l.Entry.Text)
			}
		}
	}
	return out
}

// Requests are the URLs the page asked for so far.
func (p *Page) Requests() []string {
	var out []string
	for _, e := range p.b.Events() {
		if e.SessionID != p.session || e.Method != "Network.requestWillBeSent" {
			continue
		}
		var r struct {
			Request struct {
				URL string `json:"url"`
			} `json:"request"`
		}
		json.Unmarshal(e.Params, &r)
		out = append(out, r.Request.URL)
	}
	return out
}

// SentFrames are the WebSocket messages the page sent so far, in order.
func (p *Page) SentFrames() []string {
	var out []string
	for _, e := range p.b.Events() {
		if e.SessionID != p.session || e.Method != "Network.webSocketFrameSent" {
			continue
		}
		var r struct {
			Response struct {
				PayloadData string `json:"payloadData"`
			} `json:"response"`
		}
		json.Unmarshal(e.Params, &r)
		out = append(out, r.Response.PayloadData)
	}
	return out
}
