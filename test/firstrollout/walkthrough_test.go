package firstrollout

// TestFirstRolloutFollowsTheDoc follows docs/first-rollout.md on the local fleet, so that the
// document cannot go stale: a step it shows that no longer works, or a step it leaves out, fails
// this test. The document is written for a reader, and the test reads it as one, top to bottom, by
// these conventions (which the document also states):
//
//   - A ```yaml block starts with a comment line naming its file, `# fleetrollout.yaml`: the
//     reader writes that file. `kubectl apply -f fleetrollout.yaml` applies the latest block of
//     that name to the hub. A block whose name has a directory (`deploy/deployment.yaml`) is a file
//     of the package repository, which `git add` and `git commit` take. Every block must be
//     applied or committed: a file the reader writes for nothing, or changes and never commits,
//     fails.
//   - A ```sh block holds commands, one a line (`&&` chains them, `\` continues a line, `  # `
//     starts a comment). A ```console block holds `$ command` lines, each followed by what it
//     prints: for tidegate and kubectl get, the test runs the command again, every second for up
//     to readTimeout, until its output holds those lines in order (a reader waiting for the canary
//     to soak), each as a whole line, with blanks matching any run of blanks, `<…>` any one word
//     (a commit, an age), and a line `…` standing for lines left out.
//   - ```text blocks are shown, never run. No other kind of block, and no indented block (in a list
//     item), may appear: the test would not see it.
//   - The commands are a closed set, each followed as the local fleet allows (walk.follow):
//     `go install ./cmd/tidegate` (the CLI, built once by the test), `tidegate …` (that CLI against
//     the hub), `make deploy IMG=<your image>` (hack/deploy against the hub), `kubectl -n
//     tidegate-system rollout status deployment/tidegate-controller` (see startController: the
//     controller binary run as the installed Deployment's pod would run it, since the local fleet
//     has no kubelet), `kubectl create secret generic NAME -n NS --from-file=KEY=PATH`, `kubectl
//     apply -f FILE`, `kubectl get RESOURCE -n NS` (tidegate's kinds: the API server's table,
//     printed by kubectl's printer), `git add`, `git commit -m|-am`, `git push` (to the local
//     fleet's Git server). Any other command fails the test, naming it.
//   - The only words replaced are the placeholders below; any other `<…>` in a command or a file
//     fails the test.
//
// And the other way: after the last step the test checks that the document took the reader where it
// says, so that dropping a step it needs fails too. Every rollout on the hub is Completed at the
// last commit pushed, with an earlier pushed commit as a past known-good (a release after the
// first rollout); every member runs the Deployments of that commit, image for image; the
// controller was started; and `tidegate status`, `tidegate receipts` and `kubectl get` were run
// with their output shown and checked.
//
// The fleet: a hub and two members (kube-apiservers), source-controller and kustomize-controller,
// the Git server, and the workload simulator, which plays the members' kubelets.

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/localfleet"
	"github.com/tidegate/tidegate/internal/simulator"
	"github.com/tidegate/tidegate/test/testenv"
)

// placeholders are the words of the document the test replaces, each by what the local fleet has in
// its place; walk.substitute fails on any other.
func placeholders(f *localfleet.Fleet, repo *localfleet.GitRepo, dir string) map[string]string {
	p := map[string]string{
		"<git url>": repo.URL,
		// The image is never pulled: there is no kubelet (see startController).
		"<your image>": "registry.example.com/platform/tidegate-controller:first-rollout",
	}
	for _, m := range f.Members {
		p["<"+m.Name+" kubeconfig>"] = filepath.Join(dir, m.Name+".kubeconfig")
	}
	return p
}

func TestMain(m *testing.M) {
	// The Git server logs every request with the standard logger; the fleet's logs, printed when
	// the test fails, say what matters.
	log.SetOutput(io.Discard)
	ctrl.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

func TestFirstRolloutFollowsTheDoc(t *testing.T) {
	steps := readWalkthrough(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	w := &walk{t: t, ctx: ctx, dir: t.TempDir(), bin: t.TempDir(), built: make(chan error, 1),
		files: map[string]step{}, used: map[int]bool{}, tracked: map[string]bool{}, index: map[string]bool{}, checked: map[string]bool{}}
	// The binaries build while the fleet starts.
	go func() { w.built <- buildBinaries(w.bin) }()
	// The fleet writes its own kubeconfig Secrets in a namespace of its own: the document's reader
	// writes theirs in the fleet namespace the install creates.
	w.f = localfleet.StartForTest(t, localfleet.Options{Members: 2, Namespace: "localfleet"})
	var err error
	if w.hub, err = kubernetes.NewForConfig(w.f.HubConfig); err != nil {
		t.Fatal(err)
	}
	startSimulator(t, w.f)
	// The package repository the reader has: empty until the document's first push.
	if w.repo, _, err = w.f.NewRepo("podinfo", nil); err != nil {
		t.Fatal(err)
	}
	for _, m := range w.f.Members {
		if err := os.WriteFile(filepath.Join(w.dir, m.Name+".kubeconfig"), m.KubeConfig(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	w.placeholders = placeholders(w.f, w.repo, w.dir)
	began := time.Now()
	for _, st := range steps {
		w.follow(st)
	}
	t.Logf("followed %d steps of %s in %s", len(steps), walkthroughDoc, time.Since(began).Round(time.Second))
	w.checkWhereItLeads()
}

// buildBinaries builds the CLI and the controller into dir.
func buildBinaries(dir string) error {
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/tidegate", "./cmd/tidegate-controller")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/tidegate ./cmd/tidegate-controller: %v\n%s", err, out)
	}
	return nil
}

// waitBuilt waits for buildBinaries.
func (w *walk) waitBuilt() {
	w.t.Helper()
	if w.built == nil {
		return
	}
	if err := <-w.built; err != nil {
		w.t.Fatal(err)
	}
	w.built = nil
}

// startSimulator plays the members' kubelets until the test ends: their Deployments become
// available.
func startSimulator(t *testing.T, f *localfleet.Fleet) {
	members := map[string]client.Client{}
	for _, m := range f.Members {
		members[m.Name] = m.Client
	}
	sim := simulator.New(members, simulator.Options{})
	sim.Start(context.Background())
	t.Cleanup(sim.Stop)
}

// checkWhereItLeads checks that the document took its reader where it says it does.
func (w *walk) checkWhereItLeads() {
	t := w.t
	for _, st := range w.blocks {
		if !w.used[st.line] {
			t.Errorf("%s: the reader writes this, and the document never applies or commits it", st)
		}
	}
	if w.controller == nil {
		t.Fatalf("%s never starts tidegate's controller (kubectl -n tidegate-system rollout status deployment/tidegate-controller)", walkthroughDoc)
	}
	for _, c := range []string{"tidegate status", "tidegate receipts", "kubectl get"} {
		if !w.checked[c] {
			t.Errorf("%s never shows what %s prints", walkthroughDoc, c)
		}
	}
	if len(w.pushed) < 2 {
		t.Fatalf("%s pushes %d commits: a first version and a release, at least, are what it walks through", walkthroughDoc, len(w.pushed))
	}
	var rollouts v1alpha1.FleetRolloutList
	if err := w.f.Hub.List(w.ctx, &rollouts); err != nil {
		t.Fatal(err)
	}
	if len(rollouts.Items) == 0 {
		t.Fatalf("%s leaves no FleetRollout on the hub", walkthroughDoc)
	}
	last := w.repo.Revision(w.pushed[len(w.pushed)-1].sha)
	for _, fr := range rollouts.Items {
		if fr.Status.Phase != v1alpha1.PhaseCompleted || fr.Status.LastKnownGood == nil || fr.Status.LastKnownGood.Revision != last {
			t.Errorf("FleetRollout %s/%s is %s at %+v, want Completed at the last commit pushed, %s", fr.Namespace, fr.Name, fr.Status.Phase, fr.Status.LastKnownGood, last)
		}
		var history []string
		for _, h := range fr.Status.History {
			history = append(history, h.Revision)
		}
		if first := w.repo.Revision(w.pushed[0].sha); !slices.Contains(history, first) {
			t.Errorf("FleetRollout %s/%s's history %v lacks the first version pushed, %s: no release replaced it", fr.Namespace, fr.Name, history, first)
		}
	}
	w.checkMembersRun()
}

// checkMembersRun checks that every member runs the Deployments of the package as last pushed,
// with their images.
func (w *walk) checkMembersRun() {
	t := w.t
	pkg := map[string]string{}
	for _, c := range w.pushed {
		for name, content := range c.files {
			pkg[name] = content
		}
	}
	n := 0
	for name, content := range pkg {
		for _, o := range decodeObjects(t, step{file: name, content: content}) {
			if o.GetKind() != "Deployment" {
				continue
			}
			var want appsv1.Deployment
			if err := w.f.Scheme.Convert(o, &want, nil); err != nil {
				t.Fatal(err)
			}
			n++
			for _, m := range w.f.Members {
				var got appsv1.Deployment
				if err := m.Client.Get(w.ctx, client.ObjectKeyFromObject(&want), &got); err != nil {
					t.Errorf("%s: Deployment %s/%s: %v", m.Name, want.Namespace, want.Name, err)
					continue
				}
				if have, pushed := images(got), images(want); have != pushed {
					t.Errorf("%s runs Deployment %s/%s with %s, want %s (the last version pushed)", m.Name, want.Namespace, want.Name, have, pushed)
				}
			}
		}
	}
	if n == 0 {
		t.Errorf("the package %s pushes holds no Deployment", walkthroughDoc)
	}
}

func images(d appsv1.Deployment) string {
	var s []string
	for _, c := range d.Spec.Template.Spec.Containers {
		s = append(s, c.Image)
	}
	return strings.Join(s, ",")
}
