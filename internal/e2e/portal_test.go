package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/opengpulab/gpulab/internal/testenv"
	"github.com/opengpulab/gpulab/internal/testmaster"
	"github.com/opengpulab/gpulab/job"
	"github.com/opengpulab/gpulab/store"
)

// The portal in headless Chromium against a real master (Postgres, scheduler, TLS), the real
// Dex login form and a real slave on Docker. Every step saves a screenshot under
// .tmp/test-output/<test>/.

const alicePassword = "alice-Pa55word"

type portal struct {
	*env
	ctx context.Context
	bob *testmaster.User
}

func newPortal(t *testing.T) *portal {
	t.Helper()
	docker := testenv.Docker(t)
	image := testenv.BusyboxImage(t)
	m := testmaster.Start(t, testmaster.Options{Scheduler: true, DevIdP: []testmaster.IdPUser{
		{Name: "alice", Email: "alice@example.org", Password: alicePassword},
		{Name: "bob", Email: "bob@example.org", Password: "bob-Pa55word"},
	}})
	e := &env{t: t, m: m, image: image, docker: docker, projects: t.TempDir(), scratch: t.TempDir()}
	e.alice = m.AddUser("alice", false, "", "vision")
	p := &portal{env: e, bob: m.AddUser("bob", false, "", "audio"), ctx: testenv.Browser(t)}
	return p
}

// do runs browser steps with a time limit.
func (p *portal) do(steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, testenv.WaitTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		testenv.Screenshot(p.t, p.ctx, "failure")
		html, _ := chromedp.Run(p.ctx, chromedp.OuterHTML("html"))
		p.t.Fatalf("browser: %v\npage:\n%.3000s", err, html)
	}
}

// eval runs JavaScript in the page (its value must be a boolean).
func (p *portal) eval(js string) {
	p.t.Helper()
	if _, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](js)); err != nil {
		p.t.Fatalf("eval %s: %v", js, err)
	}
}

func (p *portal) text(sel chromedp.CSS) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, testenv.WaitTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		p.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// waitText waits until the element's text contains want, without reloading the page.
func (p *portal) waitText(sel chromedp.CSS, want string) {
	p.t.Helper()
	deadline := time.Now().Add(waitLimit)
	var got string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
		got, _ = chromedp.Run(ctx, chromedp.Text(sel))
		cancel()
		if strings.Contains(got, want) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	testenv.Screenshot(p.t, p.ctx, "failure")
	p.t.Fatalf("%s did not show %q within %s (last: %q)", sel, want, waitLimit, got)
}

// login goes through the real Dex form, starting from a portal page.
func (p *portal) login(user, password string) {
	p.t.Helper()
	p.do(
		testenv.Navigate(p.m.URL+"/jobs"),
		chromedp.WaitVisible(chromedp.CSS(`input[name="login"]`)),
	)
	testenv.Screenshot(p.t, p.ctx, "01-dex-login")
	p.do(
		chromedp.SendKeys(chromedp.CSS(`input[name="login"]`), user),
		chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), password),
		chromedp.Submit(chromedp.CSS(`input[name="password"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="job-scopes"]`)),
	)
	loc, _ := chromedp.Run(p.ctx, chromedp.Location())
	if !strings.HasPrefix(loc, p.m.URL+"/jobs") {
		p.t.Fatalf("after login at %s, want the jobs page", loc)
	}
	testenv.Screenshot(p.t, p.ctx, "02-jobs-after-login")
}

func TestPortalLoginCreateJobAndWatchItFinish(t *testing.T) {
	p := newPortal(t)
	p.startSlave(slaveOpts{name: "s1", cluster: 1, fakeGPUs: "2xV100-32GB"})
	p.login("alice", alicePassword)

	// A validation error is shown next to its field, and nothing is stored.
	p.do(
		testenv.Navigate(p.m.URL+"/jobs/new"),
		chromedp.WaitVisible(chromedp.ID("field-name")),
		chromedp.SendKeys(chromedp.ID("field-name"), "broken"),
		chromedp.SendKeys(chromedp.ID("field-image"), p.image),
		chromedp.SetValue(chromedp.ID("field-cpus"), "0"),
		chromedp.Click(chromedp.CSS(`[data-testid="submit-job"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="error-cpus"]`)),
	)
	if msg := p.text(`[data-testid="error-cpus"]`); !strings.Contains(msg, "at least 1") {
		t.Errorf("cpus error says %q", msg)
	}
	testenv.Screenshot(t, p.ctx, "03-validation-error")
	if n := p.jobCount(); n != 0 {
		t.Fatalf("%d jobs stored from an invalid form", n)
	}

	// The HelloWorld job from the form: it runs, and its page shows FINISHED and the log
	// without a reload.
	p.do(
		testenv.Navigate(p.m.URL+"/jobs/new"),
		chromedp.WaitVisible(chromedp.ID("field-name")),
		chromedp.SendKeys(chromedp.ID("field-name"), "HelloWorld"),
		chromedp.SendKeys(chromedp.ID("field-image"), p.image),
		chromedp.SendKeys(chromedp.ID("field-command"), `sh -c "sleep 2; echo 'Hello World!'"`),
		chromedp.SetValue(chromedp.ID("field-cpus"), "1"),
		chromedp.SetValue(chromedp.ID("field-gpus"), "1"),
		chromedp.SetValue(chromedp.ID("field-cpuMemoryGb"), "1"),
	)
	testenv.Screenshot(t, p.ctx, "04-create-job-form")
	p.do(
		chromedp.Click(chromedp.CSS(`[data-testid="submit-job"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="job-status"]`)),
	)
	// Mark the document: if the page reloads, the mark disappears.
	p.eval(`window.__noReload = true`)
	p.waitText(`[data-testid="job-status"]`, "FINISHED")
	p.waitText(`#job-log`, "Hello World!")
	still, err := chromedp.Run(p.ctx, chromedp.Evaluate[bool](`window.__noReload === true`))
	if err != nil || !still {
		t.Errorf("the job page reloaded to show the result (mark lost: %v %v)", still, err)
	}
	testenv.Screenshot(t, p.ctx, "05-job-finished-with-log")
	if gpus := p.text(`[data-testid="job-gpus"]`); !strings.Contains(gpus, "V100") {
		t.Errorf("job page GPUs: %q", gpus)
	}

	// Live > Slaves shows the slave and its (fake) GPUs.
	s1 := slaveName("s1")
	p.do(
		testenv.Navigate(p.m.URL+"/live/slaves"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="slave-`+s1+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="gpu-`+s1+`-0"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid="gpu-`+s1+`-1"]`)),
	)
	if fake := p.text(chromedp.CSS(`[data-testid="slave-` + s1 + `"]`)); !strings.Contains(strings.ToLower(fake), "fake") {
		t.Errorf("fake GPUs not marked on Live > Slaves: %q", fake)
	}
	testenv.Screenshot(t, p.ctx, "06-live-slaves")
	p.do(testenv.Navigate(p.m.URL+"/live/clusters"), chromedp.WaitVisible(chromedp.CSS(`[data-testid="cluster-1"]`)))
	testenv.Screenshot(t, p.ctx, "07-live-clusters")
	p.do(testenv.Navigate(p.m.URL+"/jobs"), chromedp.WaitVisible(chromedp.CSS(`[data-testid="job-list"]`)))
	testenv.Screenshot(t, p.ctx, "08-jobs-list")
}

func (p *portal) jobCount() int {
	p.t.Helper()
	counts, err := p.m.Store.CountJobs(context.Background())
	if err != nil {
		p.t.Fatal(err)
	}
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func TestPortalCancelFromListAndAccess(t *testing.T) {
	p := newPortal(t)
	p.startSlave(slaveOpts{name: "s1", cluster: 1})
	running := p.submit(p.jobFile("long-runner", `echo running; while true; do sleep 0.2; done`, nil))
	p.waitFor(running, job.StatusRunning)
	// bob's job, in bob's project.
	status, data, _ := p.m.Do(p.bob, "POST", v31+"/jobs?hold=true", strings.NewReader(p.jobFile("bobs-secret", "echo hi", nil)))
	if status != 201 {
		t.Fatalf("bob submit: %d %s", status, data)
	}
	bobJob := strings.TrimSpace(string(data))

	p.login("alice", alicePassword)
	row := chromedp.CSS(fmt.Sprintf(`[data-testid="job-row-%s"]`, running))
	p.do(chromedp.WaitVisible(row))
	testenv.Screenshot(t, p.ctx, "01-list-with-running-job")
	// Cancel from the list (accepting the confirmation).
	p.eval(`(window.confirm = () => true, true)`)
	p.do(
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`[data-testid="job-row-%s"] [data-testid="action-cancel"]`, running))),
	)
	p.waitText(chromedp.CSS(fmt.Sprintf(`[data-testid="job-row-%s"] [data-testid="job-status"]`, running)), "CANCELLED")
	p.waitFor(running, job.StatusCancelled)
	testenv.Screenshot(t, p.ctx, "02-list-after-cancel")

	// alice cannot open bob's job page (another project): 404, nothing of it shown.
	p.do(testenv.Navigate(p.m.URL+"/jobs/"+bobJob), chromedp.WaitVisible(chromedp.CSS(`[data-testid="error-page"]`)))
	page := p.text(`body`)
	if strings.Contains(page, "bobs-secret") || !strings.Contains(page, "404") && !strings.Contains(strings.ToLower(page), "no job") {
		t.Errorf("bob's job page as alice: %q", page)
	}
	testenv.Screenshot(t, p.ctx, "03-other-users-job")

	// A forged cross-site POST (a page on another origin submitting a form to the portal with
	// alice's cookie) is refused, and the job is untouched.
	id := p.submit(p.jobFile("target", "echo hi", nil))
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id="f" method="POST" action="%s/jobs/%s/hold"></form><script>document.getElementById('f').submit()</script>`, p.m.URL, id)
	}))
	defer evil.Close()
	p.do(testenv.Navigate(evil.URL))
	// The browser posts the form at once; the portal answers it with a refusal page.
	target := p.m.URL + "/jobs/" + id + "/hold"
	waitUntil(t, "the forged POST to "+target, func() bool {
		ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
		defer cancel()
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		return loc == target
	})
	testenv.Screenshot(t, p.ctx, "04-forged-post")
	// Refused: without alice's cookie (SameSite keeps it from a cross-site POST) or, were it
	// sent, as cross-site.
	if page := p.text(`body`); !strings.Contains(page, "401") && !strings.Contains(page, "403") {
		t.Errorf("the forged POST was not refused: %.300q", page)
	}
	if j := p.job(id); j.State.Status == job.StatusOnHold {
		t.Fatalf("a forged cross-site POST held the job")
	}
}

func TestPortalCertificateWorksWithCLI(t *testing.T) {
	p := newPortal(t)
	p.login("alice", alicePassword)
	p.do(testenv.Navigate(p.m.URL+"/usage"), chromedp.WaitVisible(chromedp.CSS(`[data-testid="usage-rank"]`)))
	if rank := p.text(`[data-testid="usage-rank"]`); !strings.Contains(rank, "1 of") {
		t.Errorf("usage rank: %q", rank)
	}
	testenv.Screenshot(t, p.ctx, "00-usage")
	// A reservation an admin booked for alice shows in her calendar as hers.
	root := p.m.AddUser("root", true, "")
	start := time.Now().Add(26 * time.Hour).UTC().Truncate(time.Hour)
	body := fmt.Sprintf(`{"name": "paper deadline", "clusterId": 1, "gpus": 2, "start": %q, "end": %q, "users": ["alice"]}`,
		start.Format(time.RFC3339), start.Add(72*time.Hour).Format(time.RFC3339))
	if _, err := p.m.Store.CreateCluster(context.Background(), store.Cluster{ID: 1, Name: "one"}); err != nil && !errors.Is(err, store.ErrConflict) {
		t.Fatal(err)
	}
	if status, data, _ := p.m.Do(root, "POST", v31+"/reservations", strings.NewReader(body)); status != 201 {
		t.Fatalf("book: %d %s", status, data)
	}
	p.do(testenv.Navigate(p.m.URL+"/reservations"), chromedp.WaitVisible(chromedp.CSS(`[data-testid="reservations-calendar"]`)))
	if got := p.text(`[data-testid="reservations-list"]`); !strings.Contains(got, "paper deadline") || !strings.Contains(got, "yours") ||
		!strings.Contains(got, "2 GPUs of cluster 1") {
		t.Errorf("reservations list: %q", got)
	}
	testenv.Screenshot(t, p.ctx, "00-reservations")
	p.do(testenv.Navigate(p.m.URL+"/profile"), chromedp.WaitVisible(chromedp.ID("cert-form")))
	testenv.Screenshot(t, p.ctx, "01-profile")
	// Download the certificate the way the form does (with the page's CSRF token and cookie),
	// with a password.
	pemText, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`(async () => {
		const f = document.getElementById('cert-form');
		const d = new FormData(f);
		d.set('password', 's3cret-pw'); d.set('password2', 's3cret-pw');
		const r = await fetch(f.action, {method: 'POST', body: new URLSearchParams(d)});
		return r.status + "\n" + await r.text();
	})()`, chromedp.EvalAwaitPromise))
	if err != nil || !strings.HasPrefix(pemText, "200\n") || !strings.Contains(pemText, "BEGIN CERTIFICATE") {
		t.Fatalf("certificate download: %v %.200q", err, pemText)
	}
	certFile := filepath.Join(t.TempDir(), "gpulab-alice.pem")
	if err := os.WriteFile(certFile, []byte(strings.TrimPrefix(pemText, "200\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	// The real gpulab-cli binary, with the file as downloaded.
	cli := filepath.Join(t.TempDir(), "gpulab-cli")
	if out, err := exec.Command("go", "build", "-o", cli, "../../cmd/gpulab-cli").CombinedOutput(); err != nil {
		t.Fatalf("build gpulab-cli: %v %s", err, out)
	}
	id := p.submit(p.jobFile("mine", "echo hi", nil))
	out, err := exec.Command(cli, "--cert", certFile, "-p", "s3cret-pw", "--servercert", p.m.CAFile,
		"--custom-master-url", p.m.APIBase, "jobs").CombinedOutput()
	if err != nil || !strings.Contains(string(out), id) {
		t.Fatalf("gpulab-cli jobs with the downloaded certificate: %v\n%s", err, out)
	}
}
