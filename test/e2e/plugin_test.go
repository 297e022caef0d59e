package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batchv1alpha1 "github.com/safejob/safejob/api/v1alpha1"
	"github.com/safejob/safejob/internal/plugin"
	"github.com/safejob/safejob/test/cluster"
)

// kubectlPlugin runs the pinned kubectl with the plugin on PATH, as a user
// who installed it would.
type kubectlPlugin struct {
	kubectl, path, kubeconfig string
}

func buildPlugin(t *testing.T, e *env) *kubectlPlugin {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "kubectl-safejob"), "./cmd/kubectl-safejob")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	// kubectl completes a plugin's arguments through kubectl_complete-<name>.
	script, err := os.ReadFile(filepath.Join(root, "cmd", "kubectl-safejob", "kubectl_complete-safejob"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubectl_complete-safejob"), script, 0o755); err != nil { //nolint:gosec // an executable
		t.Fatal(err)
	}
	return &kubectlPlugin{kubectl: filepath.Join(e.c.BinDir, "kubectl"), path: dir + string(os.PathListSeparator) + os.Getenv("PATH"),
		kubeconfig: e.c.Kubeconfig}
}

// run runs `kubectl args...` and returns its stdout, stderr and exit code.
func (p *kubectlPlugin) run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	// kubectl takes no flag before a plugin's name: the kubeconfig goes last.
	cmd := exec.Command(p.kubectl, append(args, "--kubeconfig="+p.kubeconfig)...)
	cmd.Env = append(os.Environ(), "PATH="+p.path)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return out.String(), errOut.String(), exit.ExitCode()
	case err != nil:
		t.Fatalf("running kubectl %v: %v", args, err)
	}
	return out.String(), errOut.String(), 0
}

// TestKubectlPlugin runs `kubectl safejob` through the pinned kubectl
// (plugin discovery on PATH) against the local cluster: the ledger of a
// finished SafeJob as text and JSON, `why` of a finished and of a suspended
// one with their exit codes, and `convert` of a Job and a CronJob whose
// output the API server accepts.
func TestKubectlPlugin(t *testing.T) {
	t.Parallel() // its own cluster: runs beside the other tests
	e := newEnv(t, cluster.Options{})
	e.startOperator()
	ctx := context.Background()
	p := buildPlugin(t, e)
	done := plainSafeJob("done", 2, 2, "500ms")
	waiting := plainSafeJob("waiting", 1, 1, "500ms")
	waiting.Spec.Suspend = ptr.To(true)
	for _, sj := range []*batchv1alpha1.SafeJob{done, waiting} {
		if err := e.cl.Create(ctx, sj); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, time.Minute, "done to complete", func() bool {
		got := &batchv1alpha1.SafeJob{}
		return e.cl.Get(ctx, client.ObjectKeyFromObject(done), got) == nil && complete(got)
	})

	t.Run("ledger", func(t *testing.T) { checkLedgerCommand(t, p) })
	t.Run("ledger --watch", func(t *testing.T) { checkLedgerWatch(t, e, p) })
	t.Run("completion", func(t *testing.T) {
		// As a shell asks kubectl; the kubeconfig comes from the environment,
		// a flag after the word completed would be completed instead.
		cmd := exec.Command(p.kubectl, "__complete", "safejob", "ledger", "-n", nsSafeJob, "")
		cmd.Env = append(os.Environ(), "PATH="+p.path, "KUBECONFIG="+p.kubeconfig)
		out, err := cmd.Output()
		if err != nil || !slices.Contains(strings.Split(string(out), "\n"), "done") {
			t.Errorf("kubectl __complete safejob ledger: %v\n%s", err, out)
		}
	})
	t.Run("why", func(t *testing.T) { checkWhyCommand(t, p) })
	t.Run("runs", func(t *testing.T) { checkRunsCommand(t, e, p) })
	t.Run("run-now", func(t *testing.T) { checkRunCommand(t, e, p) })
	t.Run("top", func(t *testing.T) {
		out, errOut, code := p.run(t, "", "safejob", "top", "--once", "-n", nsSafeJob, "-o", "json")
		var list struct {
			Kind  string          `json:"kind"`
			Items []plugin.TopRow `json:"items"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil || list.Kind != "List" {
			t.Fatalf("top: exit %d, %s\n%s", code, errOut, out)
		}
		if !slices.ContainsFunc(list.Items, func(r plugin.TopRow) bool { return r.Name == "done" && r.Succeeded == 2 && r.State == "Complete" }) {
			t.Errorf("top: %+v", list.Items)
		}
		// Every namespace: the SafeJob is found beside its namespace.
		out, errOut, code = p.run(t, "", "safejob", "top", "--once", "-A", "--no-headers",
			"-o", "custom-columns=NS:.namespace,NAME:.name,STATE:.state")
		if code != 0 || !regexp.MustCompile(`(?m)^`+nsSafeJob+` +done +Complete$`).MatchString(out) {
			t.Errorf("top -A -o custom-columns: exit %d, %s\n%s", code, errOut, out)
		}
	})
	t.Run("convert", func(t *testing.T) { checkConvertCommand(t, p) })
}

// checkLedgerWatch follows the ledger of a SafeJob of three completions one
// at a time with ledger --watch from before its first launch, until every
// outcome is shown, then interrupts it as a user would (exit 0).
func checkLedgerWatch(t *testing.T, e *env, p *kubectlPlugin) {
	ctx := context.Background()
	sj := plainSafeJob("watched", 3, 1, "500ms")
	sj.Spec.Suspend = ptr.To(true)
	if err := e.cl.Create(ctx, sj); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.kubectl, "safejob", "ledger", "watched", "--watch", "-n", nsSafeJob, "--kubeconfig="+p.kubeconfig)
	cmd.Env = append(os.Environ(), "PATH="+p.path)
	out := startLines(t, cmd)
	for !strings.HasPrefix(out.next(), "SEQ") {
	}
	if err := e.cl.Patch(ctx, sj, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`))); err != nil {
		t.Fatal(err)
	}
	for succeeded := 0; succeeded < 3; {
		if strings.Contains(out.next(), "Succeeded") {
			succeeded++
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	for range out.lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("ledger --watch interrupted: %v, %s", err, out.errOut.String())
	}
	t.Logf("kubectl safejob ledger watched --watch:\n%s", strings.Join(out.shown, "\n"))
	// Each of the six entries (three launches, three outcomes) once, in order.
	var seqs []string
	for _, l := range out.shown {
		if f := strings.Fields(l); len(f) > 2 && (f[2] == "Launched" || f[2] == "Succeeded") {
			seqs = append(seqs, f[0])
		}
	}
	if !slices.Equal(seqs, []string{"1", "2", "3", "4", "5", "6"}) {
		t.Errorf("entries shown by seq %v, want 1 to 6 once each", seqs)
	}
}

// lineReader reads a running command's output line by line.
type lineReader struct {
	t      *testing.T
	lines  chan string
	shown  []string
	errOut *bytes.Buffer
}

// startLines starts cmd and reads its stdout by lines.
func startLines(t *testing.T, cmd *exec.Cmd) *lineReader {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &lineReader{t: t, lines: make(chan string), errOut: &bytes.Buffer{}}
	cmd.Stderr = r.errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(r.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
	}()
	return r
}

// next returns the next line, failing when the output ends or is silent for
// a minute.
func (r *lineReader) next() string {
	r.t.Helper()
	select {
	case l, ok := <-r.lines:
		if !ok {
			r.t.Fatalf("the output ended: %s\n%s", r.errOut.String(), strings.Join(r.shown, "\n"))
		}
		r.shown = append(r.shown, l)
		return l
	case <-time.After(time.Minute):
		r.t.Fatalf("nothing new for a minute:\n%s", strings.Join(r.shown, "\n"))
	}
	return ""
}

// checkRunsCommand lists the runs of a schedule once one has succeeded, then
// tears the schedule down.
func checkRunsCommand(t *testing.T, e *env, p *kubectlPlugin) {
	parent := plainSafeJob("every", 1, 1, "500ms")
	parent.Spec.Schedule = ptr.To("@every 3s")
	if err := e.cl.Create(context.Background(), parent); err != nil {
		t.Fatal(err)
	}
	defer tearDownParent(t, e, parent)
	var v plugin.RunsView
	waitUntil(t, time.Minute, "kubectl safejob runs to show a succeeded run", func() bool {
		out, _, code := p.run(t, "", "safejob", "runs", "every", "-n", nsSafeJob, "-o", "json")
		v = plugin.RunsView{}
		return code == 0 && json.Unmarshal([]byte(out), &v) == nil &&
			slices.ContainsFunc(v.Runs, func(r plugin.RunView) bool { return r.Result == "Succeeded" && r.Duration != "" })
	})
	if v.Schedule != "@every 3s" || v.Runs[0].Name == "" || v.Runs[0].ScheduledTime.IsZero() {
		t.Errorf("runs -o json: %+v", v)
	}
	out, _, code := p.run(t, "", "safejob", "runs", "every", "-n", nsSafeJob)
	if code != 0 || !strings.Contains(out, "Succeeded") {
		t.Errorf("runs: exit %d\n%s", code, out)
	}
	t.Logf("kubectl safejob runs every:\n%s", out)
	if _, errOut, code := p.run(t, "", "safejob", "runs", "done", "-n", nsSafeJob); code != 1 || !strings.Contains(errOut, "has no schedule") {
		t.Errorf("runs of an unscheduled SafeJob: exit %d, %s", code, errOut)
	}
}

// checkRunCommand starts two runs by hand of a suspended schedule under
// Forbid (as kubectl create job --from=cronjob/... does, whatever the
// policy), checks that each is recorded and made once (asking again for
// the same name is refused), and that the API server refuses a malformed
// request, or one on a SafeJob without schedule, naming the annotation.
func checkRunCommand(t *testing.T, e *env, p *kubectlPlugin) {
	ctx := context.Background()
	parent := plainSafeJob("yearly", 1, 1, "500ms")
	parent.Spec.Schedule = ptr.To("0 0 1 1 *")
	parent.Spec.Suspend = ptr.To(true)
	parent.Spec.ConcurrencyPolicy = batchv1alpha1.ForbidConcurrent
	if err := e.cl.Create(ctx, parent); err != nil {
		t.Fatal(err)
	}
	defer tearDownParent(t, e, parent)
	askForRuns(t, p)
	checkManualRuns(t, e, p)

	// The API server refuses a malformed request, and one on a SafeJob
	// without schedule (the policy is loaded asynchronously).
	for name, want := range map[string]string{"yearly": "does not end in -<digits>", "done": "only a SafeJob with spec.schedule"} {
		waitUntil(t, 30*time.Second, "the API server to refuse a run request on "+name, func() bool {
			_, errOut, code := p.run(t, "", "annotate", "safejob", name, batchv1alpha1.RunNowAnnotation+"=yearly-7", "--overwrite",
				"--dry-run=server", "-n", nsSafeJob)
			return code == 1 && strings.Contains(errOut, "metadata.annotations[batch.safejob.dev/run-now]") &&
				strings.Contains(errOut, want)
		})
	}
}

// askForRuns asks the parent "yearly" for two runs by hand, one under a
// generated name, one named, then for the named one again.
func askForRuns(t *testing.T, p *kubectlPlugin) {
	out, errOut, code := p.run(t, "", "safejob", "run-now", "yearly", "-n", nsSafeJob, "-o", "json")
	var first plugin.Started
	if code != 0 || json.Unmarshal([]byte(out), &first) != nil || !strings.HasPrefix(first.Name, "yearly-manual-") || first.Seq == 0 {
		t.Fatalf("run-now -o json: exit %d, %s\n%s", code, errOut, out)
	}
	out, errOut, code = p.run(t, "", "safejob", "run-now", "yearly", "--name", "yearly-by-hand", "-n", nsSafeJob)
	if code != 0 || !strings.Contains(out, "safejob.batch.safejob.dev/yearly-by-hand created") {
		t.Fatalf("run-now --name: exit %d, %s\n%s", code, errOut, out)
	}
	t.Logf("kubectl safejob run-now yearly --name yearly-by-hand:\n%s", out)
	if _, errOut, code := p.run(t, "", "safejob", "run-now", "yearly", "--name", "yearly-by-hand", "-n", nsSafeJob); code != 1 ||
		!strings.Contains(errOut, "recorded a run named yearly-by-hand") {
		t.Errorf("the same run asked for twice: exit %d, %s", code, errOut)
	}
}

// checkManualRuns waits for the two runs of "yearly" to succeed and checks
// each was made once, ran one pod and is marked manual.
func checkManualRuns(t *testing.T, e *env, p *kubectlPlugin) {
	ctx := context.Background()
	var v plugin.RunsView
	waitUntil(t, time.Minute, "both runs to succeed", func() bool {
		out, _, code := p.run(t, "", "safejob", "runs", "yearly", "-n", nsSafeJob, "-o", "json")
		v = plugin.RunsView{}
		return code == 0 && json.Unmarshal([]byte(out), &v) == nil && len(v.Runs) == 2 &&
			v.Runs[0].Result == "Succeeded" && v.Runs[1].Result == "Succeeded"
	})
	for _, r := range v.Runs {
		if r.Trigger != batchv1alpha1.ReasonManual {
			t.Errorf("run %+v: want trigger Manual", r)
		}
	}
	var children batchv1alpha1.SafeJobList
	if err := e.cl.List(ctx, &children, client.InNamespace(nsSafeJob), client.MatchingLabels{batchv1alpha1.ParentLabel: "yearly"}); err != nil {
		t.Fatal(err)
	}
	if len(children.Items) != 2 {
		t.Errorf("%d runs exist, want the 2 asked for", len(children.Items))
	}
	for _, run := range children.Items {
		if run.Annotations[batchv1alpha1.InstantiateAnnotation] != batchv1alpha1.InstantiateManual || run.Status.Succeeded != 1 ||
			run.Status.Failed != 0 {
			t.Errorf("run %s: annotations %v, succeeded %d, failed %d", run.Name, run.Annotations, run.Status.Succeeded, run.Status.Failed)
		}
	}
	out, _, _ := p.run(t, "", "safejob", "runs", "yearly", "-n", nsSafeJob)
	t.Logf("kubectl safejob runs yearly:\n%s", out)
}

// checkLedgerCommand reads the ledger of the finished SafeJob "done".
func checkLedgerCommand(t *testing.T, p *kubectlPlugin) {
	out, errOut, code := p.run(t, "", "safejob", "ledger", "done", "-n", nsSafeJob, "-o", "json")
	var v plugin.LedgerView
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("ledger -o json: exit %d, %s\n%s", code, errOut, out)
	}
	// The ledger lists the newest outcome with its launch; the rest is folded.
	if v.Totals == nil || v.Totals.Succeeded != 2 || v.Totals.Attempts != 2 || len(v.Entries) != 2 || v.Entries[0].Pod == "" ||
		v.Entries[1].Type != string(batchv1alpha1.EntrySucceeded) || v.Folded == nil || v.Folded.Seq != 3 {
		t.Errorf("ledger -o json: %+v", v)
	}
	out, _, code = p.run(t, "", "safejob", "ledger", "done", "--namespace", nsSafeJob)
	if code != 0 || !strings.Contains(out, "2 succeeded") || !strings.Contains(out, "Launched") {
		t.Errorf("ledger: exit %d\n%s", code, out)
	}
	t.Logf("kubectl safejob ledger done:\n%s", out)
}

// checkWhyCommand asks why of the finished "done" and the suspended "waiting".
func checkWhyCommand(t *testing.T, p *kubectlPlugin) {
	out, _, code := p.run(t, "", "safejob", "why", "done", "-n", nsSafeJob)
	if code != 0 || !strings.Contains(out, "Finished") {
		t.Errorf("why done: exit %d\n%s", code, out)
	}
	out, _, code = p.run(t, "", "safejob", "why", "waiting", "-n", nsSafeJob, "-o", "json")
	var verdict plugin.Verdict
	if code != 2 || json.Unmarshal([]byte(out), &verdict) != nil || verdict.State != plugin.StateWaiting ||
		len(verdict.Reasons) == 0 || verdict.Reasons[0].Kind != "Suspended" {
		t.Errorf("why waiting: exit %d (want 2)\n%s", code, out)
	}
	if _, errOut, code := p.run(t, "", "safejob", "ledger", "absent", "-n", nsSafeJob); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("ledger of a missing SafeJob: exit %d, %s", code, errOut)
	}
}

// checkConvertCommand converts a Job and a CronJob, which the API server
// then accepts, and refuses a Job with manualSelector.
func checkConvertCommand(t *testing.T, p *kubectlPlugin) {
	manifests := `apiVersion: batch/v1
kind: Job
metadata: {name: converted}
spec:
  completions: 3
  parallelism: 3
  completionMode: Indexed
  backoffLimitPerIndex: 1
  template:
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: converted-nightly}
spec:
  schedule: "0 3 * * *"
  concurrencyPolicy: Forbid
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: main, image: busybox}]
`
	out, errOut, code := p.run(t, manifests, "safejob", "convert", "-f", "-")
	if code != 0 || strings.Count(out, "kind: SafeJob") != 2 {
		t.Fatalf("convert: exit %d, %s\n%s", code, errOut, out)
	}
	if created, errOut, code := p.run(t, out, "create", "--dry-run=server", "-n", nsSafeJob, "-f", "-"); code != 0 {
		t.Errorf("the API server refuses the converted manifests: %s\n%s", errOut, created)
	}
	// The Jobs of the README's field table, every field set: converted, each
	// is accepted by the API server as a Job and as a SafeJob.
	table, err := os.ReadFile("../../internal/plugin/testdata/jobs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if created, errOut, code := p.run(t, string(table), "create", "--dry-run=server", "-n", nsSafeJob, "-f", "-"); code != 0 {
		t.Errorf("the API server refuses the field table's Jobs: %s\n%s", errOut, created)
	}
	out, errOut, code = p.run(t, string(table), "safejob", "convert", "-f", "-")
	if code != 0 {
		t.Fatalf("convert of the field table's Jobs: exit %d, %s", code, errOut)
	}
	if created, errOut, code := p.run(t, out, "create", "--dry-run=server", "-n", nsSafeJob, "-f", "-"); code != 0 ||
		strings.Count(created, "created (server dry run)") != 3 {
		t.Errorf("the API server refuses the field table's SafeJobs: %s\n%s", errOut, created)
	}
	if _, errOut, code = p.run(t, "apiVersion: batch/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  manualSelector: true\n  template: {spec: {containers: [{name: c, image: i}]}}\n",
		"safejob", "convert", "-f", "-"); code != 1 || !strings.Contains(errOut, "spec.manualSelector") {
		t.Errorf("convert of a Job with manualSelector: exit %d, %s", code, errOut)
	}
}
