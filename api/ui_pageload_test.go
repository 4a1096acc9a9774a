package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/trainq/trainq/client"
	"github.com/trainq/trainq/protocol"
	"github.com/trainq/trainq/scheduler"
)

// pageLoadWatch is run by the browser in every new document, before the
// page's own script: on a view's route it checks, each animation frame,
// whether the view's main element is in the DOM (the views draw in one
// replaceChildren), then lays it out, and at the frame after (once that
// DOM has been painted) keeps, in window.pageLoad, the times since
// navigation start, the count of elements, and the bytes of every
// resource the document loaded so far.
const pageLoadWatch = `(() => {
	const sel = %s[location.hash];
	if (!sel) return;
	const tick = () => {
		const n = document.querySelectorAll(sel).length;
		if (!n) return requestAnimationFrame(tick);
		const dom = performance.now();
		document.body.getBoundingClientRect(); // style and layout, now
		const layout = performance.now();
		requestAnimationFrame(() => {
			const out = { dom, layout, drawn: performance.now(), count: n, transfer: 0, body: 0, requests: 0 };
			for (const e of [...performance.getEntriesByType("navigation"), ...performance.getEntriesByType("resource")]) {
				out.transfer += e.transferSize; out.body += e.decodedBodySize; out.requests++;
			}
			window.pageLoad = out;
		});
	};
	requestAnimationFrame(tick);
})()`

type pageLoad struct {
	DOM, Layout, Drawn float64 // ms since navigation start
	Count, Requests    int
	Transfer, Body     float64 // bytes: on the wire (headers, gzipped bodies), and decoded bodies
}

// BenchmarkUIPageLoad loads each view of the dashboard afresh (cache
// disabled) in a headless Chromium, as a user of another workspace, over
// the allocation of uiBenchPool (1,000 8-GPU nodes, 5,000 running and
// 10,000 waiting jobs) held by the fake backend, and reports the time from
// navigation start until the view is drawn, measured in the page, and the
// bytes it loaded. It fails if a view does not draw all it should.
//
//	go test -run '^$' -bench BenchmarkUIPageLoad -benchtime 3x ./api/
func BenchmarkUIPageLoad(b *testing.B) {
	if testing.Short() {
		b.Skip("-short: BenchmarkUIPageLoad drives a browser")
	}
	chrome := chromium(b)
	p, _ := uiBenchPool(b)
	s, fb := twoWorkspaceServer(b)
	v := queueViewOf(p, 0, 10000)
	if len(v.Running)+len(v.Waiting) != 15000 || len(v.Running) < 5000 {
		b.Fatalf("setup: %d running, %d waiting", len(v.Running), len(v.Waiting))
	}
	fb.queue = v
	// The allocation's nodes, for the timeline's lanes.
	_, alloc, err := s.config().Allocation("SR006", fakeAlloc)
	if err != nil {
		b.Fatal(err)
	}
	alloc.Nodes = nil
	for _, n := range v.Nodes {
		alloc.Nodes = append(alloc.Nodes, scheduler.Node{Name: n.Name, Family: n.Family, GPUs: n.GPUs, CPU: 96, RAMGB: 768})
	}
	// The running jobs, with their attempts for the timeline (the waiting
	// ones are in the queue view only: see the timeline's bars below).
	// The timeline reads the newest timelineMaxJobs of them: the last
	// added, a bar per worker.
	bars := 0
	for i, run := range v.Running {
		if i >= len(v.Running)-timelineMaxJobs {
			bars += len(run.Placement)
		}
		started := run.StartedAt
		fb.add(client.JobInfo{JobName: run.Job, Kind: string(run.Kind), Author: "u", Workspace: run.Workspace, Running: true},
			protocol.JobStatus{State: protocol.StateRunning, Kind: run.Kind, Priority: run.Class.String(), Region: "SR006", Allocation: fakeAlloc,
				GPUs: run.GPUs, Attempt: run.Attempt, CreatedAt: started,
				Attempts: []protocol.AttemptRecord{{Number: run.Attempt, QueuedAt: started, StartedAt: &started, Placement: run.Placement}}})
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	bob := newTab(b, startBrowser(b, chrome), srv.URL, "bob", bobToken)
	if _, err := chromedp.Call(bob.ctx, network.SetCacheDisabled, network.SetCacheDisabledParams{CacheDisabled: true}); err != nil {
		b.Fatal(err)
	}

	views := []struct {
		name, route, sel string
		want             int
	}{
		{"gpus", "#/gpus", "#gpu-grid .gpu", 8000},
		// A page of 50 waiting jobs, and every running one below.
		{"queue", "#/queue", "#queue-table tr[data-job], #running-table tr[data-job]", 50 + len(v.Running)},
		{"timeline", "#/timeline", "#timeline-svg .bar", bars},
	}
	sels := map[string]string{}
	for _, v := range views {
		sels[v.route] = v.sel
	}
	js, _ := json.Marshal(sels)
	if _, err := chromedp.Call(bob.ctx, page.AddScriptToEvaluateOnNewDocument,
		page.AddScriptToEvaluateOnNewDocumentParams{Source: fmt.Sprintf(pageLoadWatch, js)}); err != nil {
		b.Fatal(err)
	}

	for _, view := range views {
		b.Run(view.name, func(b *testing.B) {
			var sum pageLoad
			n := 0
			for b.Loop() {
				b.StopTimer()
				if err := chromedp.Do(bob.ctx, chromedp.Navigate("about:blank")); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := chromedp.Do(bob.ctx, chromedp.Navigate(srv.URL+"/ui/"+view.route)); err != nil {
					b.Fatal(err)
				}
				pl, err := drawnView(bob.ctx)
				if err != nil {
					html, _ := chromedp.Run(bob.ctx, chromedp.OuterHTML(chromedp.CSS("#main")))
					b.Fatalf("%s: not drawn: %v\n%.2000s", view.route, err, html)
				}
				if pl.Count != view.want {
					b.Fatalf("%s: %d of %q drawn, want %d", view.route, pl.Count, view.sel, view.want)
				}
				sum.DOM += pl.DOM
				sum.Layout += pl.Layout
				sum.Drawn += pl.Drawn
				sum.Transfer += pl.Transfer
				sum.Body += pl.Body
				sum.Requests += pl.Requests
				n++
			}
			b.ReportMetric(sum.Drawn/float64(n), "ms/view")
			b.ReportMetric(sum.DOM/float64(n), "dom-ms/view")
			b.ReportMetric(sum.Layout/float64(n), "layout-ms/view")
			b.ReportMetric(sum.Transfer/float64(n), "transfer-bytes/view")
			b.ReportMetric(sum.Body/float64(n), "body-bytes/view")
			b.ReportMetric(float64(sum.Requests)/float64(n), "requests/view")
		})
	}
	if errs := bob.consoleErrors(); len(errs) > 0 {
		b.Fatalf("console errors: %v", errs)
	}
}

// drawnView waits for window.pageLoad in the tab's document. A poll begun
// while chromedp still holds the previous document's execution context is
// asked again.
func drawnView(tab context.Context) (pageLoad, error) {
	ctx, cancel := context.WithTimeout(tab, long)
	defer cancel()
	for {
		pl, err := chromedp.Run(ctx, chromedp.Poll[pageLoad]("window.pageLoad", chromedp.WithPollingInterval(20*time.Millisecond)))
		if err == nil || !strings.Contains(err.Error(), "Cannot find context") || ctx.Err() != nil {
			return pl, err
		}
	}
}
