package e2e

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/job"
)

// axeSource is axe-core, unmodified from its npm package (testdata/axe: VERSION, LICENSE and
// the checksum that `make axe` checks when it fetches it again).
//
//go:embed testdata/axe/axe.min.js
var axeSource string

// axeViolation is one rule axe-core found broken, with the first nodes that break it.
type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target []any  `json:"target"`
		HTML   string `json:"html"`
	} `json:"nodes"`
}

func (v axeViolation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): %s", v.ID, v.Impact, v.Help)
	for _, n := range v.Nodes {
		fmt.Fprintf(&b, "\n      %v %s", n.Target, n.HTML)
	}
	return b.String()
}

// a11yPage is a portal page the walk visits.
type a11yPage struct{ name, path string }

// a11yWorld makes the pages worth looking at: a running job with a growing log, a queued one
// that cannot start (with its explanation), a failed one, and an admin logged in.
func a11yWorld(t *testing.T) (*portal, []a11yPage, map[string]string) {
	p := newPortal(t)
	p.m.AddUser("alice", true, "", "vision") // an admin, so that the Admin page is walked too
	p.startSlave(slaveOpts{name: "s1", cluster: 1, fakeGPUs: "2xV100-32GB"})
	ids := map[string]string{}
	gpus := func(n int) func(r map[string]any) {
		return func(r map[string]any) { r["resources"].(map[string]any)["gpus"] = n }
	}
	ids["running"] = p.submit(p.jobFile("long-runner", `i=0; while true; do i=$((i+1)); echo "epoch $i"; sleep 0.2; done`, gpus(1)))
	ids["failed"] = p.submit(p.jobFile("failing", `echo "loading data"; echo "no such file" >&2; exit 3`, nil))
	p.waitFor(ids["running"], job.StatusRunning)
	// Both GPUs: it waits for the running job, with an explanation and an expected start.
	ids["queued"] = p.submit(p.jobFile("waits-for-gpus", "echo later", gpus(2)))
	p.waitFor(ids["failed"], job.StatusFailed)
	p.login("alice", alicePassword)
	pages := []a11yPage{
		{"jobs", "/jobs"},
		{"job-running", "/jobs/" + ids["running"]},
		{"job-failed", "/jobs/" + ids["failed"]},
		{"job-queued", "/jobs/" + ids["queued"]},
		{"create-job", "/jobs/new"},
		{"live-slaves", "/live/slaves"},
		{"live-clusters", "/live/clusters"},
		{"reservations", "/reservations"},
		{"usage", "/usage"},
		{"profile", "/profile"},
		{"admin", "/admin"},
		{"not-found", "/jobs/00000000-0000-4000-8000-000000000000"},
	}
	return p, pages, ids
}

// TestPortalAccessibilityAndPhones walks every portal page in Chromium at 1280 px and at a
// 390 px phone width: axe-core finds no serious or critical violation, the phone width never
// scrolls sideways, and every control can be reached with Tab and shows where the focus is.
func TestPortalAccessibilityAndPhones(t *testing.T) {
	p, pages, ids := a11yWorld(t)
	p.focusSurvivesRefresh(ids["running"])
	for _, width := range []int64{1280, 390} {
		p.do(chromedp.EmulateViewport(width, 844))
		for _, pg := range pages {
			p.do(testenv.Navigate(p.m.URL+pg.path), chromedp.WaitVisible(chromedp.CSS(`main`)))
			testenv.Screenshot(t, p.ctx, fmt.Sprintf("%s-%d", pg.name, width))
			var problems []string
			for _, v := range p.axe() {
				if v.Impact == "serious" || v.Impact == "critical" {
					problems = append(problems, v.String())
				}
			}
			if width < 500 {
				problems = append(problems, p.sideways()...)
			} else {
				problems = append(problems, p.keyboard()...)
			}
			if len(problems) > 0 {
				t.Errorf("%s at %d px (%s):\n  %s", pg.name, width, pg.path, strings.Join(problems, "\n  "))
			}
		}
	}
}

// axe runs axe-core on the page and returns its violations.
func (p *portal) axe() []axeViolation {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, testenv.WaitTimeout)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](axeSource+";\ntrue")); err != nil {
		p.t.Fatalf("load axe-core: %v", err)
	}
	out, err := chromedp.Run(ctx, chromedp.Evaluate[string](`axe.run(document, {resultTypes: ['violations']}).then(r =>
		JSON.stringify(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
			nodes: v.nodes.slice(0, 4).map(n => ({target: n.target, html: n.html.slice(0, 160)}))}))))`, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("axe.run: %v", err)
	}
	var vs []axeViolation
	if err := json.Unmarshal([]byte(out), &vs); err != nil {
		p.t.Fatalf("axe's answer: %v: %.300s", err, out)
	}
	return vs
}

// sideways names what makes the page wider than the viewport (nothing when it does not scroll
// sideways): the outermost elements that stick out and are not inside a scrolling box.
func (p *portal) sideways() []string {
	p.t.Helper()
	out, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`(() => {
		const doc = document.documentElement;
		if (doc.scrollWidth <= doc.clientWidth) return "";
		const inScroller = el => { for (let a = el.parentElement; a; a = a.parentElement) {
			const o = getComputedStyle(a).overflowX; if (o === "auto" || o === "scroll" || o === "hidden") return true; } return false; };
		const wide = [...document.querySelectorAll("body *")].filter(el =>
			el.getBoundingClientRect().right > doc.clientWidth + 1 && !inScroller(el) &&
			!(el.parentElement && el.parentElement.getBoundingClientRect().right > doc.clientWidth + 1));
		return "page is " + doc.scrollWidth + " px wide in " + doc.clientWidth + ": " +
			wide.slice(0, 6).map(el => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
				(el.className && typeof el.className === "string" ? "." + el.className.split(" ").join(".") : "") +
				" (" + Math.round(el.getBoundingClientRect().right) + " px)").join(", ");
	})()`))
	if err != nil {
		p.t.Fatalf("measure the page width: %v", err)
	}
	if out == "" {
		return nil
	}
	return []string{out}
}

// keyboard presses Tab through the page: every visible control gets the focus, each one with a
// visible focus indicator (an outline or a shadow).
func (p *portal) keyboard() []string {
	p.t.Helper()
	count, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`(() => {
		document.activeElement && document.activeElement.blur();
		window.__tabbable = [...document.querySelectorAll('a[href], button, input, select, textarea, summary, [tabindex]')]
			.filter(el => el.tabIndex >= 0 && !el.disabled && el.type !== "hidden" && el.getClientRects().length > 0 &&
				getComputedStyle(el).visibility !== "hidden" &&
				// In a closed menu: reached once the menu is opened (its summary is checked).
				!(el.tagName !== "SUMMARY" && el.closest("details:not([open])")));
		// Controls are known by what they are, not as DOM nodes: the live refresh of a running
		// job's page swaps its parts (new nodes, same controls) while the walk goes on.
		const base = el => [el.tagName, el.getAttribute("data-testid"), el.getAttribute("href"), el.getAttribute("name"),
			el.id, el.getAttribute("aria-label"), el.textContent.trim().slice(0, 40)].join("|");
		window.__key = el => base(el) + "#" + [...document.querySelectorAll(el.tagName)].filter(x => base(x) === base(el)).indexOf(el);
		window.__tabbable = window.__tabbable.map(el => ({el, key: window.__key(el)}));
		window.__reached = new Set(); window.__unmarked = [];
		return window.__tabbable.length;
	})()`))
	if err != nil {
		p.t.Fatalf("list the controls: %v", err)
	}
	// Date and time inputs take a Tab per field (day, month, year, ...): room for those.
	for i := 0; i < 4*count+10; i++ {
		if err := chromedp.Do(p.ctx, chromedp.KeyEvent(kb.Tab)); err != nil {
			p.t.Fatalf("press Tab: %v", err)
		}
		all, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`(() => {
			const el = document.activeElement;
			if (!el || el === document.body) return false;
			window.__reached.add(window.__key(el));
			const s = getComputedStyle(el);
			const outline = s.outlineStyle !== "none" && parseFloat(s.outlineWidth) > 0;
			// A date or time input marks the focused field inside it (Chromium's own highlight).
			const fields = ["date", "time", "datetime-local", "month", "week"].includes(el.type);
			if (!outline && s.boxShadow === "none" && !fields) window.__unmarked.push(el.outerHTML.slice(0, 120));
			return window.__tabbable.every(t => window.__reached.has(t.key));
		})()`))
		if err != nil {
			p.t.Fatalf("read the focus: %v", err)
		}
		if all {
			break
		}
	}
	out, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`JSON.stringify({
		missed: window.__tabbable.filter(t => !window.__reached.has(t.key)).slice(0, 6).map(t => t.el.outerHTML.slice(0, 120)),
		unmarked: [...new Set(window.__unmarked)].slice(0, 6)})`))
	if err != nil {
		p.t.Fatalf("read the walk: %v", err)
	}
	var walk struct{ Missed, Unmarked []string }
	if err := json.Unmarshal([]byte(out), &walk); err != nil {
		p.t.Fatal(err)
	}
	var problems []string
	for _, m := range walk.Missed {
		problems = append(problems, "Tab never reaches "+m)
	}
	for _, u := range walk.Unmarked {
		problems = append(problems, "no visible focus on "+u)
	}
	return problems
}

var hrefRe = regexp.MustCompile(`href="(/jobs/[0-9a-f-]{36})"`)

// TestPortalWithoutJavaScript loads every page with JavaScript off (SPEC 8): each is readable,
// and the job list, a job page and its log can be reached by following the links.
func TestPortalWithoutJavaScript(t *testing.T) {
	p, pages, ids := a11yWorld(t)
	p.waitLog(ids["running"], "epoch 3")
	p.do(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
		return err
	}))
	html := func(path string) string {
		t.Helper()
		p.do(testenv.Navigate(p.m.URL + path))
		ctx, cancel := context.WithTimeout(p.ctx, testenv.WaitTimeout)
		defer cancel()
		h, err := chromedp.Run(ctx, chromedp.OuterHTML("html"))
		if err != nil {
			t.Fatalf("page %s: %v", path, err)
		}
		return h
	}
	html("/jobs")
	if kind, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`typeof window.htmx`)); err == nil && kind != "undefined" {
		t.Fatalf("JavaScript still runs: htmx is %s", kind)
	}
	for _, pg := range pages {
		h := html(pg.path)
		testenv.Screenshot(t, p.ctx, "nojs-"+pg.name)
		main := h[strings.Index(h, "<main"):]
		if text := regexp.MustCompile(`<[^>]*>`).ReplaceAllString(main, ""); len(strings.TrimSpace(text)) < 40 {
			t.Errorf("%s without JavaScript shows almost nothing: %.300q", pg.name, text)
		}
	}
	// From the list to the running job by its link, and its log is on the page.
	list := html("/jobs")
	var target string
	for _, m := range hrefRe.FindAllStringSubmatch(list, -1) {
		if strings.HasSuffix(m[1], ids["running"]) {
			target = m[1]
		}
	}
	if target == "" {
		t.Fatalf("the job list without JavaScript has no link to the running job %s", ids["running"])
	}
	if page := html(target); !strings.Contains(page, "epoch 3") {
		t.Errorf("the running job's page without JavaScript does not show its log so far")
	}
	if raw := html(target + "/log"); !strings.Contains(raw, "epoch 3") {
		t.Errorf("the raw log without JavaScript does not show the log")
	}
}

// focusSurvivesRefresh: the running job's page replaces its live part every few seconds; a
// keyboard user on its Cancel button is still there after the refresh (htmx gives the focus
// back to the element of the same id), not sent back to the top of the page.
func (p *portal) focusSurvivesRefresh(running string) {
	p.t.Helper()
	p.do(chromedp.EmulateViewport(1280, 844), testenv.Navigate(p.m.URL+"/jobs/"+running),
		chromedp.WaitVisible(chromedp.CSS(`#job-live [data-testid=action-cancel]`)))
	ok, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`(() => {
		window.__live = document.getElementById("job-live");
		document.querySelector("#job-live [data-testid=action-cancel]").focus();
		return document.activeElement.dataset.testid === "action-cancel";
	})()`))
	if err != nil || !ok {
		p.t.Fatalf("focus the Cancel button: %v %v", ok, err)
	}
	waitUntil(p.t, "a live refresh of the job page", func() bool {
		swapped, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`document.getElementById("job-live") !== window.__live`))
		return err == nil && swapped
	})
	focused, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`(() => {
		const el = document.activeElement;
		return el && el.closest("#job-live") && el.dataset.testid === "action-cancel" ? "" : el ? el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") : "nothing";
	})()`))
	if err != nil {
		p.t.Fatal(err)
	}
	if focused != "" {
		p.t.Errorf("after a live refresh of the job page the focus is on %q, not on the Cancel button it was on", focused)
	}
	// While a live refresh is in flight (htmx marks the polling element), the buttons inside it
	// stay as they are: dimmed, they flickered every 3 s, and axe's contrast check failed when it
	// ran during a refresh.
	opacity, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`(() => {
		const live = document.getElementById("job-live");
		live.classList.add("htmx-request");
		const o = getComputedStyle(live.querySelector("[data-testid=action-cancel]")).opacity;
		live.classList.remove("htmx-request");
		return o;
	})()`))
	if err != nil || opacity != "1" {
		p.t.Errorf("during a live refresh the Cancel button's opacity is %q (%v), want 1", opacity, err)
	}
}
