package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tidegate/tidegate/api/v1alpha1"
	"github.com/tidegate/tidegate/internal/ops"
)

// versionView is what `tidegate version` reports: this binary, the tidegate CRDs the hub serves
// and the controller Deployments running on it.
type versionView struct {
	Client      clientVersion       `json:"client"`
	CRDs        []crdVersion        `json:"crds,omitempty"`
	Controllers []controllerVersion `json:"controllers,omitempty"`
	// Error says why the hub could not be asked; the client version is still reported.
	Error *ops.Error `json:"error,omitempty"`
}

type clientVersion struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
}

type crdVersion struct {
	Name    string   `json:"name"`
	Served  []string `json:"served"`
	Storage string   `json:"storage"`
	// Installed is false when the hub has no such CRD.
	Installed bool `json:"installed"`
	// crd is the CRD as the hub has it, for tidegate check.
	crd *apiextensionsv1.CustomResourceDefinition
}

type controllerVersion struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Images    []string `json:"images"`
	Replicas  int32    `json:"replicas"`
	Ready     int32    `json:"ready"`
	// deployment is the Deployment as the hub has it, for tidegate check.
	deployment *appsv1.Deployment
}

// tidegateCRDs are the CRDs of tidegate's kinds.
var tidegateCRDs = []string{"fleetrollouts." + v1alpha1.GroupVersion.Group, "fleetclusters." + v1alpha1.GroupVersion.Group, "gatereceipts." + v1alpha1.GroupVersion.Group, "rolloutledgers." + v1alpha1.GroupVersion.Group}

func newVersionCommand(k *kubeOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Show the versions of this command line, of the tidegate CRDs on the hub and of the controller",
		Long: `version shows this command line's version, the API versions the hub serves for each tidegate CRD
(and which one it stores), and each tidegate controller Deployment on the hub (label
app.kubernetes.io/name=tidegate, component controller) with its images and ready replicas.

Exit code: 0 when the hub answered, 2 when it could not be asked (the client version is shown first).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkKubeOutput(output); err != nil {
				return err
			}
			v := versionView{Client: clientVersion{Version: version(), GoVersion: runtime.Version()}}
			c, _, err := k.client()
			if err == nil {
				v.CRDs, v.Controllers, err = hubVersions(cmd, c)
			}
			if err != nil {
				v.Error = mcpError(err, ops.Ref{Kind: "hub"})
			}
			out := cmd.OutOrStdout()
			if output != outputTable {
				if werr := writeData(out, output, v); werr != nil {
					return werr
				}
			} else {
				printVersion(out, v)
			}
			if err != nil {
				return &exitError{code: exitUsage, err: v.Error, inOutput: output != outputTable}
			}
			return nil
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func hubVersions(cmd *cobra.Command, c client.Client) ([]crdVersion, []controllerVersion, error) {
	ctx := cmd.Context()
	var crds []crdVersion
	for _, name := range tidegateCRDs {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, types.NamespacedName{Name: name}, crd); err != nil {
			if e := ops.AsError(err, ops.Ref{Kind: "customresourcedefinition", Name: name}); e.Code != ops.CodeNotFound {
				return nil, nil, e
			}
			crds = append(crds, crdVersion{Name: name})
			continue
		}
		cv := crdVersion{Name: name, Installed: true, crd: crd}
		for _, ver := range crd.Spec.Versions {
			if ver.Served {
				cv.Served = append(cv.Served, ver.Name)
			}
			if ver.Storage {
				cv.Storage = ver.Name
			}
		}
		crds = append(crds, cv)
	}
	var deps appsv1.DeploymentList
	if err := c.List(ctx, &deps, client.MatchingLabels{"app.kubernetes.io/name": "tidegate", "app.kubernetes.io/component": "controller"}); err != nil {
		return crds, nil, ops.AsError(err, ops.Ref{Kind: "deployments"})
	}
	var controllers []controllerVersion
	for i := range deps.Items {
		d := &deps.Items[i]
		cv := controllerVersion{Namespace: d.Namespace, Name: d.Name, Ready: d.Status.ReadyReplicas, Replicas: 1, deployment: d}
		if d.Spec.Replicas != nil {
			cv.Replicas = *d.Spec.Replicas
		}
		for _, ctr := range d.Spec.Template.Spec.Containers {
			cv.Images = append(cv.Images, ctr.Image)
		}
		controllers = append(controllers, cv)
	}
	slices.SortFunc(controllers, byNamespaceName(func(c controllerVersion) (string, string) { return c.Namespace, c.Name }))
	return crds, controllers, nil
}

func printVersion(w interface{ Write([]byte) (int, error) }, v versionView) {
	fmt.Fprintf(w, "client: tidegate %s (%s)\n", v.Client.Version, v.Client.GoVersion)
	if v.Error != nil {
		return
	}
	for _, crd := range v.CRDs {
		if !crd.Installed {
			fmt.Fprintf(w, "crd: %s not installed\n", crd.Name)
			continue
		}
		fmt.Fprintf(w, "crd: %s serves %s, stores %s\n", crd.Name, strings.Join(crd.Served, ", "), ops.OrDash(crd.Storage))
	}
	if len(v.Controllers) == 0 {
		fmt.Fprintln(w, "controller: no tidegate controller Deployment on the hub (label app.kubernetes.io/name=tidegate)")
	}
	for _, ctr := range v.Controllers {
		fmt.Fprintf(w, "controller: %s/%s %s, %d/%d ready\n", ctr.Namespace, ctr.Name, strings.Join(ctr.Images, ", "), ctr.Ready, ctr.Replicas)
	}
}

// version is the module version tidegate was built at ("(devel)" from a work tree).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
