package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/spf13/cobra"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/config"
	"github.com/tidegate/tidegate/internal/ops"
)

// minKubernetes is the oldest hub tidegate supports: that of the Flux release whose controllers
// tidegate is built and tested with (Flux 2.9: source-controller and kustomize-controller v1.9,
// see go.mod), which supports Kubernetes 1.34.1 and later.
const minKubernetes = "1.34.1"

// The controller's ServiceAccount as config/rbac installs it, for when no controller Deployment
// says which it runs as.
const (
	controllerNamespace      = "tidegate-system"
	controllerServiceAccount = "tidegate-controller"
)

// Results of a check.
const (
	checkOK      = "ok"
	checkWarning = "warning"
	checkFailed  = "failed"
)

// Sections of tidegate check; --pre checks only the prerequisites.
const (
	sectionPrerequisites = "prerequisites"
	sectionTidegate      = "tidegate"
)

type checkResult struct {
	Section string `json:"section"`
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
	// Fix says what to do about a check that failed or warns.
	Fix string `json:"fix,omitempty"`
}

type checkView struct {
	Checks []checkResult `json:"checks"`
	// Passed is false when a check failed; a warning does not fail.
	Passed bool `json:"passed"`
}

// fluxCRD is a Flux kind the controller uses, at the API version it uses.
type fluxCRD struct {
	name, version string
	// optional says who needs a kind that not every hub needs: its check only informs, and never
	// fails.
	optional string
}

// fluxCRDs are the Flux kinds the controller reads and writes (see controllers/): the
// Kustomizations it writes per cluster, and the GitRepositories and OCIRepositories it tracks and
// pins, all at the versions of the Flux API modules it is built with; and the HelmReleases it
// writes per cluster instead of Kustomizations for a rollout of a Helm chart, which only such a
// rollout needs (the controller runs without them, and says to install helm-controller on a
// chart rollout).
var fluxCRDs = []fluxCRD{
	{name: "kustomizations." + kustomizev1.GroupVersion.Group, version: kustomizev1.GroupVersion.Version},
	{name: "gitrepositories." + sourcev1.GroupVersion.Group, version: sourcev1.GroupVersion.Version},
	{name: "ocirepositories." + sourcev1.GroupVersion.Group, version: sourcev1.GroupVersion.Version},
	{name: "helmreleases." + helmv2.GroupVersion.Group, version: helmv2.GroupVersion.Version, optional: "a rollout of a Helm chart (spec.chart) needs it"},
}

func newCheckCommand(k *kubeOptions) *cobra.Command {
	var (
		output string
		pre    bool
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check that the hub has what tidegate needs, and that the controller runs",
		Long: `check checks the hub, as flux check does, and prints one line per check:

  kubernetes        the hub answers, at Kubernetes ` + minKubernetes + ` or later (the minimum of the
                    Flux release tidegate is built with)
  Flux CRDs         Kustomization, GitRepository and OCIRepository are installed, established and
                    served at the API version the controller uses; whether HelmRelease is, which
                    only a rollout of a Helm chart needs (informational: it never fails)
  tidegate CRDs     FleetRollout, FleetCluster and GateReceipt are installed, established, served at
                    ` + v1alpha1.GroupVersion.Version + `, with the schema of this version of tidegate
  controller        its Deployment (label app.kubernetes.io/name=tidegate, component controller) has
                    every replica ready, and runs the version of this command line
  controller RBAC   its ServiceAccount may do what config/rbac grants it (SubjectAccessReviews;
                    a warning when you may not create them)

--pre checks only the prerequisites (Kubernetes and Flux), before tidegate is installed.
A check that fails or warns says what to do.

Exit code: 0 when every check passes (warnings included), 1 when one fails, 2 on a usage error or a
kubeconfig that cannot be read.`,
		Example: `  tidegate check --pre
  tidegate check -o json`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := k.clientFor(output, checkKubeOutput)
			if err != nil {
				return err
			}
			cfg, err := k.flags.ToRESTConfig()
			if err != nil {
				return &exitError{code: exitUsage, err: fmt.Errorf("reading the kubeconfig: %w", err)}
			}
			disc, err := discovery.NewDiscoveryClientForConfig(cfg)
			if err != nil {
				return &exitError{code: exitUsage, err: fmt.Errorf("connecting to %s: %w", cfg.Host, err)}
			}
			v := runChecks(cmd, c, disc, cfg.Host, pre)
			return printAnswer(cmd, output, v, func(w io.Writer) error { printChecks(w, v); return nil }, !v.Passed)
		},
	}
	addOutputFlag(cmd, &output)
	cmd.Flags().BoolVar(&pre, "pre", false, "check only the prerequisites: Kubernetes and Flux's CRDs")
	return cmd
}

func runChecks(cmd *cobra.Command, c client.Client, disc discovery.ServerVersionInterface, host string, pre bool) checkView {
	ctx := cmd.Context()
	checks := []checkResult{checkKubernetes(disc, host)}
	// A hub that does not answer fails every other check the same way: one line says it.
	if checks[0].Status == checkOK {
		for _, f := range fluxCRDs {
			checks = append(checks, checkFluxCRD(ctx, c, f))
		}
		if !pre {
			checks = append(checks, checkTidegate(cmd, c)...)
		}
	}
	v := checkView{Checks: checks, Passed: true}
	for _, ch := range checks {
		if ch.Status == checkFailed {
			v.Passed = false
		}
	}
	return v
}

func checkKubernetes(disc discovery.ServerVersionInterface, host string) checkResult {
	r := checkResult{Section: sectionPrerequisites, Name: "kubernetes"}
	info, err := disc.ServerVersion()
	if err != nil {
		return r.failed(fmt.Sprintf("the hub at %s does not answer: %v", host, oneLine(err.Error())),
			"check --kubeconfig and --context, and that you may reach the API server")
	}
	have, err := utilversion.ParseGeneric(info.GitVersion)
	if err != nil {
		return r.failed(fmt.Sprintf("the hub reports version %q, which is not a Kubernetes version", info.GitVersion), "")
	}
	if !have.AtLeast(utilversion.MustParseGeneric(minKubernetes)) {
		return r.failed(fmt.Sprintf("%s is older than %s", info.GitVersion, minKubernetes),
			"upgrade the hub to Kubernetes "+minKubernetes+" or later")
	}
	return r.ok(fmt.Sprintf("%s (%s or later)", info.GitVersion, minKubernetes))
}

func checkFluxCRD(ctx context.Context, c client.Client, f fluxCRD) checkResult {
	r := checkResult{Section: sectionPrerequisites, Name: "crd " + f.name}
	const install = "install Flux 2.9 or later (flux install)"
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := c.Get(ctx, types.NamespacedName{Name: f.name}, crd); err != nil {
		if ops.CodeOf(err) == ops.CodeNotFound {
			if f.optional != "" {
				return r.ok("not installed; " + f.optional + ": install helm-controller (flux install, whose default components include it)")
			}
			return r.failed("not installed", install)
		}
		return f.informed(r.failed(apiError(err, "customresourcedefinition "+f.name).Error(), readFix(err, "get customresourcedefinitions")))
	}
	return f.informed(checkCRD(r, crd, f.version, install))
}

// informed is the check r of f, a warning rather than a failure when f is optional: a hub
// without it works for every rollout that does not need it.
func (f fluxCRD) informed(r checkResult) checkResult {
	if f.optional != "" && r.Status == checkFailed {
		r.Status = checkWarning
		r.Message += "; " + f.optional
	}
	return r
}

// checkCRD checks that crd is established and serves version; fix says what to do otherwise.
func checkCRD(r checkResult, crd *apiextensionsv1.CustomResourceDefinition, version, fix string) checkResult {
	if !established(crd) {
		return r.failed("not established: the API server does not serve it yet (kubectl describe crd "+crd.Name+")", fix)
	}
	served := servedVersions(crd)
	if !slices.Contains(served, version) {
		return r.failed(fmt.Sprintf("serves %s, not %s", strings.Join(served, ", "), version), fix)
	}
	return r.ok("serves " + strings.Join(served, ", "))
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

func servedVersions(crd *apiextensionsv1.CustomResourceDefinition) []string {
	var served []string
	for _, v := range crd.Spec.Versions {
		if v.Served {
			served = append(served, v.Name)
		}
	}
	return served
}

// checkTidegate checks tidegate's CRDs, controller and its RBAC, from what tidegate version reads.
func checkTidegate(cmd *cobra.Command, c client.Client) []checkResult {
	crds, controllers, err := hubVersions(cmd, c)
	var checks []checkResult
	if crds == nil {
		r := checkResult{Section: sectionTidegate, Name: "crds"}
		return []checkResult{r.failed(mcpError(err, ops.Ref{Kind: "customresourcedefinitions"}).Message, readFix(err, "get customresourcedefinitions"))}
	}
	embedded, eerr := config.CRDs()
	for _, crd := range crds {
		checks = append(checks, checkTidegateCRD(crd, embedded, eerr))
	}
	if err != nil {
		r := checkResult{Section: sectionTidegate, Name: "controller"}
		return append(checks, r.failed(mcpError(err, ops.Ref{Kind: "deployments"}).Message, readFix(err, "list deployments --all-namespaces")))
	}
	checks = append(checks, checkControllers(controllers)...)
	return append(checks, checkControllerRBAC(cmd.Context(), c, controllers))
}

func checkTidegateCRD(cv crdVersion, embedded []*apiextensionsv1.CustomResourceDefinition, embedErr error) checkResult {
	r := checkResult{Section: sectionTidegate, Name: "crd " + cv.Name}
	const install = "install the CRDs of this version of tidegate: kubectl apply --server-side -k config/crd"
	if !cv.Installed {
		return r.failed("not installed", install)
	}
	if r = checkCRD(r, cv.crd, v1alpha1.GroupVersion.Version, install); r.Status != checkOK || embedErr != nil {
		return r
	}
	i := slices.IndexFunc(embedded, func(e *apiextensionsv1.CustomResourceDefinition) bool { return e.Name == cv.Name })
	if i < 0 {
		return r
	}
	if !equality.Semantic.DeepEqual(schemaOf(embedded[i], v1alpha1.GroupVersion.Version), schemaOf(cv.crd, v1alpha1.GroupVersion.Version)) {
		return r.failed(fmt.Sprintf("its %s schema is not that of this tidegate (%s): the hub has the CRDs of another version", v1alpha1.GroupVersion.Version, version()),
			install+", or use the tidegate of the version the hub runs")
	}
	r.Message += ", with this tidegate's schema"
	return r
}

func schemaOf(crd *apiextensionsv1.CustomResourceDefinition, version string) *apiextensionsv1.CustomResourceValidation {
	for _, v := range crd.Spec.Versions {
		if v.Name == version {
			return v.Schema
		}
	}
	return nil
}

// checkControllers checks that each controller Deployment has every replica ready, and that it runs
// the version of this command line.
func checkControllers(controllers []controllerVersion) []checkResult {
	if len(controllers) == 0 {
		return []checkResult{{Section: sectionTidegate, Name: "controller", Status: checkFailed,
			Message: "no tidegate controller Deployment on the hub (label app.kubernetes.io/name=tidegate, app.kubernetes.io/component=controller)",
			Fix:     "install the controller: kubectl apply --server-side -k config/controller"}}
	}
	var checks []checkResult
	for _, ctr := range controllers {
		r := checkResult{Section: sectionTidegate, Name: fmt.Sprintf("controller %s/%s", ctr.Namespace, ctr.Name)}
		images := strings.Join(ctr.Images, ", ")
		if ctr.Replicas == 0 || ctr.Ready < ctr.Replicas {
			checks = append(checks, r.failed(fmt.Sprintf("%d/%d replicas ready (%s)", ctr.Ready, ctr.Replicas, images),
				fmt.Sprintf("see why: kubectl -n %s describe deployment %s; kubectl -n %s logs deployment/%s", ctr.Namespace, ctr.Name, ctr.Namespace, ctr.Name)))
		} else {
			checks = append(checks, r.ok(fmt.Sprintf("%d/%d replicas ready (%s)", ctr.Ready, ctr.Replicas, images)))
		}
		checks = append(checks, checkSkew(ctr))
	}
	return checks
}

// checkSkew compares the tag of the controller's image with this command line's version: a
// command line of another version may not know the fields the controller writes, or write ones
// it does not know. A skew warns; it does not fail.
func checkSkew(ctr controllerVersion) checkResult {
	r := checkResult{Section: sectionTidegate, Name: fmt.Sprintf("controller %s/%s version", ctr.Namespace, ctr.Name)}
	cli := version()
	tag := imageTag(ctr.Images[0])
	switch {
	case cli == "(devel)":
		return r.ok(fmt.Sprintf("runs %s; this tidegate is a development build, not compared", ctr.Images[0]))
	case tag == "":
		return r.ok(fmt.Sprintf("runs %s, without a tag to compare with this tidegate's %s", ctr.Images[0], cli))
	case tag != cli:
		r.Status = checkWarning
		r.Message = fmt.Sprintf("runs %s, this tidegate is %s", ctr.Images[0], cli)
		r.Fix = "use the tidegate of the controller's version, or upgrade the controller to " + cli
		return r
	}
	return r.ok("runs " + ctr.Images[0] + ", the version of this tidegate")
}

// imageTag is the tag of an image reference, "" when it has none (or is pinned by digest only).
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") { // a registry's port, not a tag
		return ""
	}
	return image[i+1:]
}

// checkControllerRBAC asks the hub, by SubjectAccessReviews, whether the controller's
// ServiceAccount may do everything config/rbac/role.yaml grants it.
func checkControllerRBAC(ctx context.Context, c client.Client, controllers []controllerVersion) checkResult {
	ns, sa := controllerNamespace, controllerServiceAccount
	if len(controllers) > 0 {
		d := controllers[0].deployment
		ns, sa = d.Namespace, d.Spec.Template.Spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
	}
	user := fmt.Sprintf("system:serviceaccount:%s:%s", ns, sa)
	r := checkResult{Section: sectionTidegate, Name: "controller RBAC"}
	cluster, namespaced, err := config.ControllerRules()
	if err != nil {
		return r.failed(err.Error(), "")
	}
	var denied []string
	asked := 0
	for _, a := range accessesOf(cluster, namespaced, ns) {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &a,
		}}
		if err := c.Create(ctx, sar); err != nil {
			if ops.CodeOf(err) == ops.CodeForbidden {
				r.Status = checkWarning
				r.Message = "not checked: you may not create subjectaccessreviews.authorization.k8s.io"
				r.Fix = fmt.Sprintf("ask for that permission, or let someone who has it run: kubectl auth can-i --list --as %s", user)
				return r
			}
			return r.failed(apiError(err, "a subjectaccessreview of "+user).Error(), "check that the API server answers, and run tidegate check again")
		}
		asked++
		if !sar.Status.Allowed {
			denied = append(denied, describeAccess(a))
		}
	}
	const fix = "apply the controller's RBAC: kubectl apply --server-side -k config/controller"
	switch {
	case len(denied) == asked:
		return r.failed(fmt.Sprintf("%s may do none of the %d things config/rbac grants it", user, asked), fix)
	case len(denied) > maxDenied:
		denied = append(denied[:maxDenied], fmt.Sprintf("%d more", len(denied)-maxDenied))
		fallthrough
	case len(denied) > 0:
		return r.failed(fmt.Sprintf("%s may not %s", user, strings.Join(denied, ", ")), fix)
	}
	return r.ok(fmt.Sprintf("%s may do the %d things config/rbac grants it", user, asked))
}

// maxDenied is how many of the accesses the controller lacks the RBAC check names.
const maxDenied = 6

// accessesOf expands the rules of the ClusterRole (cluster-wide) and of the Role (in namespace
// ns) into one access per verb, resource and subresource.
func accessesOf(cluster, namespaced []rbacv1.PolicyRule, ns string) []authorizationv1.ResourceAttributes {
	var out []authorizationv1.ResourceAttributes
	expand := func(rules []rbacv1.PolicyRule, ns string) {
		for _, rule := range rules {
			for _, group := range rule.APIGroups {
				for _, res := range rule.Resources {
					resource, sub, _ := strings.Cut(res, "/")
					for _, verb := range rule.Verbs {
						out = append(out, authorizationv1.ResourceAttributes{Namespace: ns, Group: group, Resource: resource, Subresource: sub, Verb: verb})
					}
				}
			}
		}
	}
	expand(cluster, "")
	expand(namespaced, ns)
	return out
}

// describeAccess is "create configmaps", "patch fleetrollouts.tidegate.dev/status in tidegate-system".
func describeAccess(a authorizationv1.ResourceAttributes) string {
	s := a.Verb + " " + a.Resource
	if a.Group != "" {
		s += "." + a.Group
	}
	if a.Subresource != "" {
		s += "/" + a.Subresource
	}
	if a.Namespace != "" {
		s += " in " + a.Namespace
	}
	return s
}

// readFix says what to do about an error reading what a check needs: ask for the permission when
// it is forbidden (verb, as kubectl auth can-i takes it), else look at the connection.
func readFix(err error, verb string) string {
	if ops.CodeOf(err) == ops.CodeForbidden {
		return "ask for the permission to " + verb + " (kubectl auth can-i " + verb + ")"
	}
	return "check that the API server answers, and run tidegate check again"
}

func (r checkResult) ok(msg string) checkResult {
	r.Status, r.Message = checkOK, msg
	return r
}

func (r checkResult) failed(msg, fix string) checkResult {
	r.Status, r.Message, r.Fix = checkFailed, msg, fix
	return r
}

// checkMarks are the marks of a check's line, as flux check prints them.
var checkMarks = map[string]string{checkOK: "✔", checkWarning: "⚠", checkFailed: "✗"}

func printChecks(w io.Writer, v checkView) {
	section := ""
	failed, warned := 0, 0
	for _, ch := range v.Checks {
		if ch.Section != section {
			section = ch.Section
			fmt.Fprintf(w, "► checking %s\n", section)
		}
		line := fmt.Sprintf("%s %s: %s", checkMarks[ch.Status], ch.Name, ch.Message)
		if ch.Fix != "" {
			line += "; " + ch.Fix
		}
		fmt.Fprintln(w, line)
		switch ch.Status {
		case checkFailed:
			failed++
		case checkWarning:
			warned++
		}
	}
	switch {
	case failed > 0:
		fmt.Fprintf(w, "✗ %d of %d checks failed\n", failed, len(v.Checks))
	case warned > 0:
		fmt.Fprintf(w, "✔ all checks passed, %d with a warning\n", warned)
	default:
		fmt.Fprintln(w, "✔ all checks passed")
	}
}
