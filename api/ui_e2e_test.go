package api

import (
	"context"
	"fmt"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chromium is Debian's Chromium (apt-get install chromium), or
// $TRAINQ_CHROMIUM. Without one the browser test is skipped, unless CI is
// set: then it fails, so that a CI run cannot pass without a real browser.
func chromium(t testing.TB) string {
	t.Helper()
	for _, c := range []string{os.Getenv("TRAINQ_CHROMIUM"), "/usr/bin/chromium", "chromium"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	msg := "no Chromium (apt-get install chromium, or set TRAINQ_CHROMIUM)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// tab is one browser tab signed in with one token. It records every
// console error and uncaught exception, and the body of every answer the
// page fetched.
type tab struct {
	t    testing.TB
	ctx  context.Context
	name string

	mu      sync.Mutex
	errors  []string
	urls    map[network.RequestID]string
	bodies  []answerBody // every answer's body, in order
	pending sync.WaitGroup
}

type answerBody struct{ url, body string }

func newTab(t testing.TB, browser context.Context, base, name, token string) *tab {
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	tb := &tab{t: t, ctx: ctx, name: name, urls: map[network.RequestID]string{}}
	_, err := chromedp.Call(ctx, network.Enable, network.EnableParams{})
	require.NoError(t, err, "enable the network domain")
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				tb.addError(string(m.Type) + ": " + m.Text + " " + m.URL)
			}
		}
	}()
	finished := make(chan network.RequestID, 1024)
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *network.EventResponseReceived:
			tb.mu.Lock()
			tb.urls[ev.RequestID] = ev.Response.URL
			tb.mu.Unlock()
		case *network.EventLoadingFinished:
			tb.pending.Add(1)
			select {
			case finished <- ev.RequestID:
			default:
				tb.pending.Done()
				tb.addError("too many answers to keep")
			}
		}
	}))
	// The bodies are read outside the event loop (Listen's fn may not call the browser).
	go func() {
		for id := range finished {
			tb.mu.Lock()
			u, ok := tb.urls[id]
			tb.mu.Unlock()
			if ok {
				if res, err := chromedp.Call(ctx, network.GetResponseBody, network.GetResponseBodyParams{RequestID: id}); err == nil {
					tb.mu.Lock()
					tb.bodies = append(tb.bodies, answerBody{u, string(res.Body)})
					tb.mu.Unlock()
				}
			}
			tb.pending.Done()
		}
	}()
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/ui/#token="+url.QueryEscape(token)),
		chromedp.WaitVisible(chromedp.CSS("#gpu-grid"))))
	return tb
}

func (tb *tab) addError(s string) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.errors = append(tb.errors, s)
}

// open shows a view (a hash route) and waits until the element sel is there.
func (tb *tab) open(route, sel string) {
	tb.t.Helper()
	require.NoError(tb.t, chromedp.Do(tb.ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf("location.hash = %q", route)),
		chromedp.WaitReady(chromedp.CSS(sel))), "%s: open %s", tb.name, route)
}

// until waits, within the test's patience, for a JavaScript condition on the DOM.
func (tb *tab) until(what, js string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, long)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(long)))
	if err != nil {
		html, _ := chromedp.Run(tb.ctx, chromedp.OuterHTML(chromedp.CSS("#view")))
		tb.t.Fatalf("%s: waiting for %s: %v\npage:\n%s", tb.name, what, err, html)
	}
}

// choose sets a select's value and tells the page, in one step inside the
// page: the views redraw on a timer, so a node chromedp looked up a moment
// before may be gone by the time it acts on it ("No node with given id").
func (tb *tab) choose(id, value string) error {
	return chromedp.Do(tb.ctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(
		`(() => { const s = document.getElementById(%q); s.value = %q; s.dispatchEvent(new Event("change")); })()`, id, value)))
}

// html is the whole document as it is now.
func (tb *tab) html() string {
	tb.t.Helper()
	h, err := chromedp.Run(tb.ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	require.NoError(tb.t, err)
	return h
}

// shoot writes a PNG of the viewport to docs/ui/<name>.png when
// TRAINQ_UI_SCREENSHOTS is set.
func (tb *tab) shoot(name string) {
	tb.t.Helper()
	if os.Getenv("TRAINQ_UI_SCREENSHOTS") == "" {
		return
	}
	png, err := chromedp.Run(tb.ctx, chromedp.CaptureScreenshot())
	require.NoError(tb.t, err)
	dir := filepath.Join("..", "docs", "ui")
	require.NoError(tb.t, os.MkdirAll(dir, 0o755))
	require.NoError(tb.t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
	tb.t.Logf("wrote docs/ui/%s.png (%d KB)", name, len(png)/1024)
}

// startBrowser starts a headless Chromium for the test.
func startBrowser(t testing.TB, chrome string) context.Context {
	t.Helper()
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]), chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.WindowSize(1200, 760))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	browser, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(browser), "start Chromium")
	return browser
}

// consoleErrors are the tab's console errors, less those whose text ends with one of expected.
func (tb *tab) consoleErrors(expected ...string) []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var errs []string
	for _, e := range tb.errors {
		if !slices.ContainsFunc(expected, func(x string) bool { return strings.HasSuffix(strings.TrimSpace(e), x) }) {
			errs = append(errs, e)
		}
	}
	return errs
}

// TestUIViewsFake opens every view in a real Chromium as bob, over the fake
// backend whose jobs name alice's everywhere a name can go: each view draws,
// with no console error, and neither the page nor any answer it fetched
// names one of alice's jobs.
func TestUIViewsFake(t *testing.T) {
	chrome := chromium(t)
	s, _ := twoWorkspaceServer(t)
	srv := httptest.NewServer(s)
	defer srv.Close()
	bob := newTab(t, startBrowser(t, chrome), srv.URL, "bob", bobToken)
	bob.until("the grid's cells", `document.querySelectorAll(".gpu").length > 0`)
	// Without a mouse: one tab stop, arrows move, focus shows the holder.
	bob.until("one tab stop in the grid", `document.querySelectorAll(".gpu[tabindex='0']").length == 1`)
	require.NoError(t, chromedp.Do(bob.ctx, chromedp.Evaluate[chromedp.Void](`document.querySelector(".gpu[data-gpu='0']").focus()`), chromedp.KeyEvent(kb.ArrowRight)))
	bob.until("the next GPU focused and described", `document.activeElement.dataset.gpu == "1" && document.getElementById("gpu-detail").textContent.includes("GPU 1: held, `+nbB+`")`)
	page := bob.html()
	bob.open("#/queue", "#queue-table")
	bob.until("the queue's rows", `document.querySelectorAll("#queue-table tr[data-job]").length == 2`)
	page += bob.html()
	// The class filter is the server's: choosing low asks for class=low and lists bob's low job only.
	require.NoError(t, bob.choose("f-class", "low"))
	bob.until("only the low job listed", `(() => { const rows = [...document.querySelectorAll("#queue-table tr[data-job]")];
		return rows.length == 1 && rows[0].dataset.job == `+js(jobB)+` && rows[0].textContent.includes("low") &&
			document.getElementById("q-page").textContent.includes("1 of 2 waiting match") })()`)
	page += bob.html()
	require.NoError(t, bob.choose("f-class", ""))
	bob.until("every class again", `document.querySelectorAll("#queue-table tr[data-job]").length == 2`)
	// "my workspace only" asks for bob's workspace, and lists his job only.
	require.NoError(t, chromedp.Do(bob.ctx, chromedp.Evaluate[chromedp.Void](`document.getElementById("f-mine").click()`)))
	bob.until("only bob's job listed", `(() => { const rows = [...document.querySelectorAll("#queue-table tr[data-job]")];
		return rows.length == 1 && rows[0].dataset.job == `+js(jobB)+` && document.getElementById("f-mine").checked })()`)
	require.NoError(t, chromedp.Do(bob.ctx, chromedp.Evaluate[chromedp.Void](`document.getElementById("f-mine").click()`)))
	bob.until("every workspace again", `document.querySelectorAll("#queue-table tr[data-job]").length == 2`)
	bob.open("#/job/"+jobB, "#attempts")
	bob.until("bob's job page", `document.getElementById("job-name").textContent == `+js(jobB)+` && document.querySelectorAll("#attempts tr").length == 3`)
	page += bob.html()
	bob.open("#/timeline", "#timeline-svg")
	bob.until("the timeline", `document.getElementById("timeline-svg") != null`)
	page += bob.html()
	bob.pending.Wait()
	bob.mu.Lock()
	var fetched []string
	for _, a := range bob.bodies {
		fetched = append(fetched, strings.TrimPrefix(a.url, srv.URL))
	}
	for _, u := range []string{"/ui/api/allocations/default/gpus?region=SR006", "/ui/api/allocations/default/timeline?region=SR006&hours=1", "/public/v2/jobs/" + jobB} {
		assert.Contains(t, fetched, u, "the answers the page fetched are read")
	}
	assert.True(t, slices.ContainsFunc(fetched, func(u string) bool {
		return strings.HasPrefix(u, "/public/v2/allocations/default/queue?") && strings.Contains(u, "&class=low")
	}), "the class filter is a query parameter: %v", fetched)
	assert.True(t, slices.ContainsFunc(fetched, func(u string) bool {
		return strings.HasPrefix(u, "/public/v2/allocations/default/queue?") && strings.Contains(u, "&workspace="+teamB)
	}), "my workspace only is a query parameter: %v", fetched)
	for _, n := range foreignToBob {
		assert.NotContains(t, page, n)
		for _, a := range bob.bodies {
			assert.NotContains(t, a.body, n, a.url)
		}
	}
	bob.mu.Unlock()
	assert.Empty(t, bob.consoleErrors(), "bob's console")

	// The console is watched: an error the page writes is seen.
	require.NoError(t, chromedp.Do(bob.ctx, chromedp.Evaluate[chromedp.Void](`console.error("probe")`)))
	bob.until("nothing", "true")
	require.Eventually(t, func() bool { return len(bob.consoleErrors()) == 1 }, 10*time.Second, 50*time.Millisecond, "the probe is seen")
}

// js quotes s as a JavaScript string.
func js(s string) string { return fmt.Sprintf("%q", s) }

// TestUIPlaysThePrioritiesExample plays the priorities page's worked
// example on allocation ui (four 2-GPU nodes) with real workers gated by
// files, and watches it in a real headless Chromium: an admin's tab and
// alice's (a user of team-a, whose jobs are Job 1 and Job 4; Job 0, 2 and
// 3 are bob's, of team-b).
func TestUIPlaysThePrioritiesExample(t *testing.T) {
	needServer(t)
	chrome := chromium(t)
	dir := t.TempDir()
	gate := func(name string) { require.NoError(t, os.WriteFile(filepath.Join(dir, name), nil, 0o644)) }
	untilGate := func(job string) string {
		return "while [ ! -e " + dir + "/" + job + "-w$NODE_RANK ]; do sleep 0.05; done"
	}
	slowToStop := "trap '" + untilGate("job0") + "; exit 143' TERM; while true; do sleep 0.05; done"
	spec := func(class string, workers int, script string) map[string]any {
		return map[string]any{"script": script, "base_image": "busybox", "instance_type": "a100.2gpu", "allocation_name": "ui",
			"type": "binary", "priority_class": class, "n_workers": workers, "max_retry": 0}
	}

	browser := startBrowser(t, chrome)
	admin := newTab(t, browser, env.server.URL, "admin", env.tokens["root"])
	alice := newTab(t, browser, env.server.URL, "alice", env.tokens["alice"])
	for _, tb := range []*tab{admin, alice} {
		require.NoError(t, tb.choose("alloc", "SR006/ui"))
	}

	job0 := submitJob(t, "bob", spec("low", 2, slowToStop))
	waitStatus(t, "bob", job0, "Running")
	job1 := submitJob(t, "alice", spec("high", 2, untilGate("job1")))
	waitStatus(t, "alice", job1, "Running")
	job2 := submitJob(t, "bob", spec("low", 1, "echo job 2 ran"))
	job3 := submitJob(t, "bob", spec("medium", 2, untilGate("job3")))
	bobs := []string{job0, job2, job3}

	// Job 3 (medium) preempts Job 0 (low), which stops slowly: Job 0's GPUs
	// are releasing, nominated to Job 3; Job 1's are held.
	admin.open("#/gpus", "#gpu-grid")
	admin.until("Job 0's GPUs nominated to Job 3",
		`[...document.querySelectorAll('.gpu[data-job=`+js(job0)+`]')].length == 4 && [...document.querySelectorAll('.gpu[data-job=`+js(job0)+`]')].every(c => c.dataset.state == "nominated" && c.dataset.nominatedTo == `+js(job3)+` && c.getAttribute("aria-label").includes("nominated to "+`+js(job3)+`))`)
	admin.until("Job 1's GPUs held", `[...document.querySelectorAll('.gpu[data-job=`+js(job1)+`]')].filter(c => c.dataset.state == "held" && c.classList.contains("high")).length == 4`)
	// alice sees Job 0's cells without its name, and her own Job 1 by name.
	alice.open("#/gpus", "#gpu-grid")
	alice.until("alice's grid", `document.querySelectorAll('.gpu[data-state="nominated"][data-job=`+js(hiddenName)+`]').length == 4 && document.querySelectorAll('.gpu[data-job=`+js(job1)+`]').length == 4`)
	page := alice.html()

	// Job 4 (high) arrives: nothing is free, and Job 1 may not be preempted for it.
	job4 := submitJob(t, "alice", spec("high", 1, untilGate("job4")))
	admin.open("#/queue", "#queue-table")
	admin.until("Job 4, Job 3 and Job 2 waiting with reasons", `["`+job4+`","`+job3+`","`+job2+`"].every(j => { const r = document.querySelector('#queue-table tr[data-job="'+j+'"]'); return r && r.querySelector(".reason").textContent.length > 0 })`)
	admin.shoot("queue")
	alice.open("#/queue", "#queue-table")
	alice.until("alice's queue: Job 4 by name, bob's Job 3 and Job 2 hidden", `document.querySelector('#queue-table tr[data-job=`+js(job4)+`]') != null && document.querySelectorAll('#queue-table tr[data-job=`+js(hiddenName)+`]').length == 2`)
	page += alice.html()
	admin.open("#/gpus", "#gpu-grid")
	admin.until("the grid again", `document.querySelectorAll('.gpu[data-state="nominated"]').length == 4`)
	admin.shoot("allocations")

	// Job 1's worker 0 finishes: Job 4 starts on the node it vacated.
	st1 := waitStatus(t, "alice", job1, "Running")
	require.Len(t, st1.Attempts, 1)
	require.Len(t, st1.Attempts[0].Placement, 2)
	vacated := st1.Attempts[0].Placement[0].Node
	gate("job1-w0")
	waitStatus(t, "alice", job4, "Running")
	admin.until("Job 4 on the node Job 1 vacated", `document.querySelectorAll('.gpu[data-node=`+js(vacated)+`][data-job=`+js(job4)+`]').length == 2`)

	// Job 0 stops: Job 3 runs; then everyone finishes.
	gate("job0-w0")
	gate("job0-w1")
	waitStatus(t, "bob", job3, "Running")
	gate("job1-w1")
	waitStatus(t, "bob", job2, "Completed")
	for _, g := range []string{"job3-w0", "job3-w1", "job4-w0"} {
		gate(g)
	}
	waitStatus(t, "bob", job0, "Preempted")
	for _, j := range []struct{ user, job string }{{"alice", job1}, {"bob", job3}, {"alice", job4}} {
		waitStatus(t, j.user, j.job, "Completed")
	}

	// The timeline: Job 4's bar on the node Job 1 vacated, starting after
	// Job 1's worker 0 there, and an arrow from Job 0 to Job 3.
	admin.open("#/timeline", "#timeline-svg")
	admin.until("the timeline's bars", `document.querySelectorAll('#timeline-svg .bar').length >= 8`)
	admin.until("Job 4's bar on "+vacated, `[...document.querySelectorAll('#timeline-svg .bar[data-job=`+js(job4)+`]')].some(b => b.dataset.node == `+js(vacated)+`)`)
	// (Job 1's workflow records the release when its node activity returns; the node agent told
	// the allocator at the same moment, so Job 4 may start a little before that record.)
	admin.until("Job 4's bar on "+vacated+" starting once Job 1's worker there released it",
		`(() => { const on = (j) => [...document.querySelectorAll('#timeline-svg .bar[data-job='+JSON.stringify(j)+'][data-node=`+js(vacated)+`]')];
		const j1 = on(`+js(job1)+`), j4 = on(`+js(job4)+`);
		return j1.length == 1 && j4.length == 1 && j1[0].dataset.end != "" && +j4[0].dataset.start >= +j1[0].dataset.end - 1000 })()`)
	admin.until("Job 1's workers released one by one", `(() => { const b = [...document.querySelectorAll('#timeline-svg .bar[data-job=`+js(job1)+`]')];
		return b.length == 2 && +b.find(x => x.dataset.worker == "0").dataset.end < +b.find(x => x.dataset.worker == "1").dataset.end })()`)
	admin.until("an arrow from Job 0 to Job 3", `document.querySelector('#timeline-svg .arrow[data-from=`+js(job0)+`][data-to=`+js(job3)+`]') != null`)
	admin.shoot("timeline")

	// The job page of Job 1, as alice: its attempt with placement and end, and the buttons.
	alice.open("#/job/"+job1, "#attempts")
	alice.until("Job 1's page", `document.getElementById("job-name").textContent == `+js(job1)+` && document.querySelector("#job-facts .state").textContent == "Completed" && document.querySelector("#attempts").textContent.includes(`+js(vacated)+`) && document.getElementById("restart") != null && document.getElementById("logs") != null`)
	alice.shoot("job")
	// A job of another workspace is not there for alice.
	alice.open("#/job/"+job3, "h1")
	alice.until("no page for bob's job", `document.querySelector("#view h1").textContent == "No such job"`)

	// Every view as alice: bob's jobs are never named, in the page or in
	// any answer it fetched; her own are.
	alice.open("#/queue", "#queue-table")
	alice.until("alice's queue", `document.getElementById("q-page") != null`)
	alice.open("#/timeline", "#timeline-svg")
	alice.until("alice's timeline", `[...document.querySelectorAll('#timeline-svg .bar[data-job=`+js(job4)+`]')].some(b => b.dataset.node == `+js(vacated)+`) && document.querySelectorAll('#timeline-svg .bar[data-job=`+js(hiddenName)+`]').length >= 5`)
	page += alice.html()
	alice.open("#/gpus", "#gpu-grid")
	alice.until("alice's grid, after", `document.querySelectorAll(".gpu").length == 8`)
	page += alice.html()
	alice.pending.Wait()
	alice.mu.Lock()
	bodies := alice.bodies
	alice.mu.Unlock()
	for _, b := range bobs {
		assert.NotContains(t, page, b, "alice's page names bob's job")
		for _, a := range bodies {
			assert.NotContains(t, a.body, b, "alice's page fetched %s, which names bob's job", a.url)
		}
	}
	var sawTimeline bool
	for _, a := range bodies {
		sawTimeline = sawTimeline || strings.Contains(a.url, "/ui/api/allocations/ui/timeline")
	}
	assert.True(t, sawTimeline, "the timeline's answer was recorded")

	// The one answer that is an error on purpose: bob's job, asked for by alice.
	assert.Empty(t, admin.consoleErrors(), "admin's console")
	assert.Empty(t, alice.consoleErrors("/public/v2/jobs/"+job3), "alice's console")
}
