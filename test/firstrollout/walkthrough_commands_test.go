package firstrollout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/localfleet"
)

// readTimeout is how long a command whose output the document shows is run again until it prints
// that: the reader runs `tidegate status` until the canary soaks, say.
const readTimeout = 4 * time.Minute

// walk is a reader following the walkthrough on the local fleet: what the document had them write,
// commit and start so far.
type walk struct {
	t   *testing.T
	ctx context.Context
	f   *localfleet.Fleet
	// hub reaches the hub's API for the reads kubectl makes (a table) and a ServiceAccount's token.
	hub  *kubernetes.Clientset
	repo *localfleet.GitRepo
	// dir is the reader's working directory: HOME of the commands, the controller's kubeconfig.
	dir string
	// bin holds tidegate and tidegate-controller once built has delivered (nil: built).
	bin   string
	built chan error
	// placeholders are the words of the document replaced by what the local fleet has instead.
	placeholders map[string]string

	files    map[string]step // the latest block of each file the document names
	blocks   []step          // every block, in order
	used     map[int]bool    // the blocks applied or committed, by their line
	tracked  map[string]bool // files git add'ed once
	index    map[string]bool // files git add'ed since the last commit
	unpushed []commit
	pushed   []commit // each with its SHA

	cliInstalled bool
	// controller is tidegate-controller's process, once the document installed and waited for it.
	controller *exec.Cmd
	checked    map[string]bool // the commands whose output the document shows, by their first two words
}

// commit is a commit the reader made: its message and the files it holds (path → content).
type commit struct {
	message string
	files   map[string]string
	sha     string
}

// follow does what st asks: a YAML block is remembered as the file it names; a command is run if
// it is one the test knows, and fails the test naming it if not.
func (w *walk) follow(st step) {
	w.t.Helper()
	if st.file != "" {
		st.content = w.substitute(st, st.content)
		w.files[st.file] = st
		w.blocks = append(w.blocks, st)
		return
	}
	args, err := words(w.substitute(st, st.command))
	if err != nil || len(args) == 0 {
		w.t.Fatalf("%s: %v", st, err)
	}
	read := false
	switch {
	case slices.Equal(args, []string{"go", "install", "./cmd/tidegate"}):
		w.cliInstalled = true
	case args[0] == "tidegate":
		w.tidegate(st, args[1:])
		read = true
	case len(args) == 3 && args[0] == "make" && args[1] == "deploy" && strings.HasPrefix(args[2], "IMG="):
		w.deploy(st, strings.TrimPrefix(args[2], "IMG="))
	case slices.Equal(args, []string{"kubectl", "-n", "tidegate-system", "rollout", "status", "deployment/tidegate-controller"}):
		w.startController(st)
	case len(args) > 4 && slices.Equal(args[:4], []string{"kubectl", "create", "secret", "generic"}):
		w.createSecret(st, args[4:])
	case len(args) == 4 && slices.Equal(args[:3], []string{"kubectl", "apply", "-f"}):
		w.apply(st, args[3])
	case len(args) >= 2 && args[0] == "kubectl" && args[1] == "get":
		w.kubectlGet(st, args[2:])
		read = true
	case args[0] == "git":
		w.git(st, args[1:])
	default:
		w.t.Fatalf("%s: the test does not know how to follow this command: teach it (test/firstrollout/walkthrough_commands_test.go) or take the command out of the document", st)
	}
	if len(st.output) > 0 && !read {
		w.t.Fatalf("%s: the document shows what this command prints, and the test checks the output of tidegate and kubectl get only: show it in a text block", st)
	}
}

// substitute replaces the placeholders in s, and fails on any other word in angle brackets: a
// placeholder the test would not know how to fill in.
func (w *walk) substitute(st step, s string) string {
	for k, v := range w.placeholders {
		s = strings.ReplaceAll(s, k, v)
	}
	if p := placeholder.FindString(s); p != "" {
		w.t.Fatalf("%s: %s is not one of the placeholders the test fills in (%s)", st, p, strings.Join(slices.Sorted(maps.Keys(w.placeholders)), ", "))
	}
	return s
}

// tidegate runs the CLI against the hub; when the document shows what it prints, again every second
// until it prints that (and exits 0), as a reader waits for the rollout to get there.
func (w *walk) tidegate(st step, args []string) {
	w.t.Helper()
	if !w.cliInstalled {
		w.t.Fatalf("%s: tidegate is run before the document installs it", st)
	}
	w.waitBuilt()
	w.read(st, func() (string, error) {
		cmd := exec.CommandContext(w.ctx, filepath.Join(w.bin, "tidegate"), args...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+w.f.HubKubeConfigPath, "HOME="+w.dir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	})
}

// read runs a read until it prints what st shows, once when st shows nothing.
func (w *walk) read(st step, run func() (string, error)) {
	w.t.Helper()
	if len(st.output) > 0 {
		words := strings.Fields(st.command)
		w.checked[strings.Join(words[:min(2, len(words))], " ")] = true
	}
	deadline := time.Now().Add(readTimeout)
	for {
		out, err := run()
		ok, missing := printed(st.output, out)
		if err == nil && ok {
			w.t.Logf("%s\n%s", st, out)
			return
		}
		if len(st.output) == 0 || time.Now().After(deadline) || w.ctx.Err() != nil {
			if err != nil {
				w.t.Fatalf("%s: %v\n%s", st, err, out)
			}
			w.t.Fatalf("%s: after %s it still does not print %q (and what the document shows after it); it printed:\n%s", st, readTimeout, missing, out)
		}
		time.Sleep(time.Second)
	}
}

// deploy is `make deploy IMG=…`, hack/deploy against the hub.
func (w *walk) deploy(st step, img string) {
	w.t.Helper()
	if out, ok := deploy(w.t, nil, "-image", img, "-kubeconfig", w.f.HubKubeConfigPath); !ok {
		w.t.Fatalf("%s: %s", st, out)
	}
}

// startController stands for the Deployment's rollout: the local fleet has no kubelet, so the pod
// make deploy asked for never runs. In its place the test runs the same binary, cmd/tidegate-
// controller, as that pod would: the installed Deployment's args (its metrics and health ports
// moved to free ones) and env, under a token of its ServiceAccount, so that the RBAC the install
// grants is what the walkthrough runs with. The rollout status the reader waits for is the pod's
// readiness probe, /readyz.
func (w *walk) startController(st step) {
	w.t.Helper()
	var dep appsv1.Deployment
	if err := w.f.Hub.Get(w.ctx, client.ObjectKey{Namespace: "tidegate-system", Name: "tidegate-controller"}, &dep); err != nil {
		w.t.Fatalf("%s: %v", st, err)
	}
	pod := dep.Spec.Template.Spec
	container := pod.Containers[0]
	health := freePort(w.t)
	var args []string
	for _, a := range container.Args {
		switch name, _, _ := strings.Cut(a, "="); name {
		case "--health-addr":
			a = name + "=" + health
		case "--metrics-addr":
			a = name + "=" + freePort(w.t)
		}
		args = append(args, a)
	}
	env := append(os.Environ(), "KUBECONFIG="+w.serviceAccountKubeconfig(st, dep.Namespace, pod.ServiceAccountName), "HOME="+w.dir)
	for _, e := range container.Env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
			w.t.Fatalf("%s: the test cannot set the Deployment's env %s", st, e.Name)
		}
		env = append(env, e.Name+"="+dep.Namespace)
	}
	w.waitBuilt()
	cmd := exec.Command(filepath.Join(w.bin, "tidegate-controller"), args...)
	log := w.f.OpenLog("tidegate-controller.log")
	cmd.Env, cmd.Stdout, cmd.Stderr = env, log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.controller = cmd
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	w.t.Cleanup(func() {
		// As the kubelet stops a pod: SIGTERM, then SIGKILL after its grace period.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		select {
		case <-exited:
			w.t.Fatalf("%s: tidegate-controller %s exited (%v); its log is printed with the fleet's", st, strings.Join(args, " "), cmd.ProcessState)
		default:
		}
		_, err := httpGet("http://" + health + "/readyz")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s: tidegate-controller is not ready after 2 minutes: GET /readyz: %v", st, err)
		}
	}
}

// serviceAccountKubeconfig writes a kubeconfig that reaches the hub with a token of the
// ServiceAccount ns/name, as its pods are given one, and returns its path.
func (w *walk) serviceAccountKubeconfig(st step, ns, name string) string {
	w.t.Helper()
	expiry := int64(3600)
	tr, err := w.hub.CoreV1().ServiceAccounts(ns).CreateToken(w.ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		w.t.Fatalf("%s: a token of ServiceAccount %s/%s: %v", st, ns, name, err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["hub"] = &clientcmdapi.Cluster{Server: w.f.HubConfig.Host, CertificateAuthorityData: w.f.HubConfig.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: name}
	kc.CurrentContext = "hub"
	path := filepath.Join(w.dir, name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		w.t.Fatal(err)
	}
	return path
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	return string(b), err
}

// createSecret is `kubectl create secret generic NAME -n NS --from-file=KEY=PATH`.
func (w *walk) createSecret(st step, args []string) {
	w.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: args[0]}, Data: map[string][]byte{}}
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case (a == "-n" || a == "--namespace") && i+1 < len(args):
			i++
			s.Namespace = args[i]
		case strings.HasPrefix(a, "--from-file="):
			key, path, ok := strings.Cut(strings.TrimPrefix(a, "--from-file="), "=")
			b, err := os.ReadFile(path)
			if !ok || err != nil {
				w.t.Fatalf("%s: %s: the test reads --from-file=KEY=PATH only: %v", st, a, err)
			}
			s.Data[key] = b
		default:
			w.t.Fatalf("%s: the test does not know the flag %s", st, a)
		}
	}
	if err := w.f.Hub.Create(w.ctx, s); err != nil {
		w.t.Fatalf("%s: %v", st, err)
	}
}

// apply is `kubectl apply -f FILE`: every object of the latest block named FILE, applied to the
// hub (server-side, as kubectl's field manager).
func (w *walk) apply(st step, file string) {
	w.t.Helper()
	block, ok := w.files[file]
	if !ok {
		w.t.Fatalf("%s: the document shows no block # %s before this", st, file)
	}
	w.used[block.line] = true
	for _, o := range decodeObjects(w.t, block) {
		if err := w.f.Hub.Apply(w.ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
			w.t.Fatalf("%s: %s %s: %v", st, o.GetKind(), o.GetName(), err)
		}
	}
}

// decodeObjects reads the objects of a YAML block, in order: its documents, apart at each line
// `---`, as the document writes them.
func decodeObjects(t *testing.T, block step) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, doc := range strings.Split(block.content, "\n---\n") {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", block, err)
		}
		if string(j) == "null" {
			continue // comments only
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(j); err != nil {
			t.Fatalf("%s: %v", block, err)
		}
		objs = append(objs, o)
	}
	return objs
}

// kubectlGet is `kubectl get RESOURCE -n NS` for tidegate's kinds: the API server's table of them,
// asked for as kubectl asks, printed by kubectl's own table printer (k8s.io/cli-runtime).
func (w *walk) kubectlGet(st step, args []string) {
	w.t.Helper()
	if len(args) != 3 || (args[1] != "-n" && args[1] != "--namespace") {
		w.t.Fatalf("%s: the test runs kubectl get RESOURCE -n NAMESPACE only", st)
	}
	gv := v1alpha1.GroupVersion
	resources, err := w.hub.Discovery().ServerResourcesForGroupVersion(gv.String())
	if err != nil {
		w.t.Fatal(err)
	}
	i := slices.IndexFunc(resources.APIResources, func(r metav1.APIResource) bool {
		return r.Name == args[0] || r.SingularName == args[0] || slices.Contains(r.ShortNames, args[0])
	})
	if i < 0 {
		w.t.Fatalf("%s: the test runs kubectl get for the kinds of %s only", st, gv)
	}
	resource, ns := resources.APIResources[i].Name, args[2]
	w.read(st, func() (string, error) {
		body, err := w.hub.Discovery().RESTClient().Get().AbsPath("/apis", gv.Group, gv.Version, "namespaces", ns, resource).
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(w.ctx)
		if err != nil {
			return "", err
		}
		var table metav1.Table
		if err := json.Unmarshal(body, &table); err != nil {
			return "", err
		}
		if len(table.Rows) == 0 {
			return fmt.Sprintf("No resources found in %s namespace.\n", ns), nil
		}
		var out bytes.Buffer
		err = printers.NewTablePrinter(printers.PrintOptions{}).PrintObj(&table, &out)
		return out.String(), err
	})
}

// git is what the reader does in their clone of the package repository: `git add PATH…` (a file or
// a directory of files the document showed), `git commit -m MSG` (-am: with every file added
// before), and `git push`, which pushes the commits to the local fleet's Git server.
func (w *walk) git(st step, args []string) {
	w.t.Helper()
	switch {
	case len(args) > 1 && args[0] == "add":
		for _, p := range args[1:] {
			dir := strings.TrimSuffix(p, "/") + "/"
			n := 0
			for name := range w.files {
				if name == p || strings.HasPrefix(name, dir) {
					w.tracked[name], w.index[name] = true, true
					n++
				}
			}
			if n == 0 {
				w.t.Fatalf("%s: the document shows no file %s", st, p)
			}
		}
	case len(args) == 3 && args[0] == "commit" && (args[1] == "-m" || args[1] == "-am"):
		c := commit{message: args[2], files: map[string]string{}}
		for name := range w.tracked {
			if w.index[name] || args[1] == "-am" {
				c.files[name] = w.files[name].content
				w.used[w.files[name].line] = true
			}
		}
		w.index = map[string]bool{}
		w.unpushed = append(w.unpushed, c)
	case len(args) == 1 && args[0] == "push":
		for _, c := range w.unpushed {
			sha, err := w.repo.Commit(c.message, c.files, nil)
			if err != nil {
				w.t.Fatalf("%s: %v", st, err)
			}
			c.sha = sha
			w.pushed = append(w.pushed, c)
		}
		w.unpushed = nil
	default:
		w.t.Fatalf("%s: the test follows git add PATH…, git commit -m|-am MESSAGE and git push only", st)
	}
}
