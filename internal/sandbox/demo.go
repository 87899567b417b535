package sandbox

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
)

// demoFS holds the demo's three repositories (see demo/README.md). It is embedded so that the
// binary needs no checkout of the repository to play the demo; go:embed cannot reach testdata/,
// so testdata/demo links here.
//
//go:embed demo
var demoFS embed.FS

// The demo's repositories, in the order they are committed.
const (
	repoFleet    = "fleet"
	repoPodinfo  = "podinfo"
	repoPolicies = "platform-policies"
)

// Names of the demo's objects on the hub.
const (
	fleetNamespace    = "fleet"
	bootstrapNS       = "flux-system"
	bootstrapName     = "fleet"
	rolloutName       = "podinfo"
	appNamespace      = "podinfo"
	webWorkload       = appNamespace + "/web"
	clustersFile      = "hub/clusters.yaml"
	gitServerVar      = "git_server"
	registryVar       = "oci_registry"
	prometheusVar     = "prometheus"
	cosignSecret      = "cosign-pub"
	ociTag            = "latest"
	clusterLabel      = "env"
	clusterLabelValue = "sandbox"
)

var demoRepos = []string{repoFleet, repoPodinfo, repoPolicies}

// repoFiles returns the files of one demo repository, path → content, as they are committed.
// The fleet repository's clusters.yaml is written for members clusters.
func repoFiles(repo string, members int) (map[string]string, error) {
	files, err := embeddedFiles(repo)
	if err != nil {
		return nil, err
	}
	if repo == repoFleet {
		files[clustersFile] = clustersYAML(members)
	}
	return files, nil
}

// embeddedFiles returns the files of the directory dir of the embedded demo, path → content.
func embeddedFiles(dir string) (map[string]string, error) {
	root := path.Join("demo", dir)
	files := map[string]string{}
	err := fs.WalkDir(demoFS, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := demoFS.ReadFile(p)
		if err != nil {
			return err
		}
		files[strings.TrimPrefix(p, root+"/")] = string(b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the embedded demo repository %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("the embedded demo has no repository %s", dir)
	}
	return files, nil
}

// memberName is the name localfleet gives the i-th member cluster (1-based).
func memberName(i int) string { return fmt.Sprintf("member-%d", i) }

// clustersYAML is hub/clusters.yaml for n member clusters: one FleetCluster each, with the
// kubeconfig Secret localfleet writes for it.
func clustersYAML(n int) string {
	var b strings.Builder
	b.WriteString(`# The member clusters, one FleetCluster each. ` + "`tidegate sandbox up --clusters N`" + ` writes this file
# for N clusters; the sandbox writes each member's kubeconfig Secret (member-N-kubeconfig).
# The FleetRollout podinfo selects the clusters labelled env: sandbox.
`)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `---
apiVersion: tidegate.dev/v1alpha1
kind: FleetCluster
metadata:
  name: %[1]s
  namespace: %[2]s
  labels:
    %[3]s: %[4]s
spec:
  kubeConfig:
    secretRef:
      name: %[1]s-kubeconfig
`, memberName(i), fleetNamespace, clusterLabel, clusterLabelValue)
	}
	return b.String()
}

// pkgLayout is the podinfo package as the sandbox commits it: where its embedded files are, the
// file a release changes, the lines there that name the release, and the file holding db's volume
// size.
type pkgLayout struct {
	// dir is the package's directory under demo/.
	dir string
	// releaseFile names the release: a commit that changes its lines is a release.
	releaseFile string
	// lines are releaseFile's lines that name the release, each one line of the file.
	lines []releaseLine
	// storageFile holds db's volume size, a line `storage: NGi`.
	storageFile string
}

// releaseLine is a line of a package's release file that names the release: pattern matches it,
// with what comes before its value as ${1}; value is its value for a version vN.
type releaseLine struct {
	pattern *regexp.Regexp
	shape   string // the line's shape, for errors
	value   func(version string) string
}

var (
	// kustomizePackage is demo/podinfo: a release is the image tag and the version the ConfigMap
	// reports, in app/kustomization.yaml.
	kustomizePackage = pkgLayout{dir: repoPodinfo, releaseFile: "app/kustomization.yaml", storageFile: "app/db.yaml", lines: []releaseLine{
		{regexp.MustCompile(`(?m)^([ \t]*newTag:[ \t]*)v[0-9]+[ \t]*$`), "newTag: vN", same},
		{regexp.MustCompile(`(?m)^([ \t]*-[ \t]*version=)v[0-9]+[ \t]*$`), "- version=vN", same},
	}}
	// chartPackage is demo/podinfo-chart, with --helm: a release vN is the chart's version 0.N.0
	// and its appVersion vN (the image tag and the version the ConfigMap reports), in Chart.yaml.
	chartPackage = pkgLayout{dir: "podinfo-chart", releaseFile: "Chart.yaml", storageFile: "values.yaml", lines: []releaseLine{
		{regexp.MustCompile(`(?m)^(version:[ \t]*)0\.[0-9]+\.0[ \t]*$`), "version: 0.N.0", chartVersion},
		{regexp.MustCompile(`(?m)^(appVersion:[ \t]*)v[0-9]+[ \t]*$`), "appVersion: vN", same},
	}}
	storagePattern = regexp.MustCompile(`(?m)^([ \t]*storage:[ \t]*)([0-9]+Gi)[ \t]*$`)
)

func same(version string) string { return version }

// chartVersion is the chart version of release vN: 0.N.0.
func chartVersion(version string) string { return "0." + strings.TrimPrefix(version, "v") + ".0" }

// setVersion returns the package's release file (content) releasing version: each of its release
// lines set to the version's value.
func (p pkgLayout) setVersion(content, version string) (string, error) {
	for _, l := range p.lines {
		if len(l.pattern.FindAllString(content, -1)) != 1 {
			return "", fmt.Errorf("%s should have one `%s` line to release %s; the demo expects the package as the sandbox committed it", p.releaseFile, l.shape, version)
		}
	}
	for _, l := range p.lines {
		content = l.pattern.ReplaceAllString(content, "${1}"+l.value(version))
	}
	return content, nil
}

// setStorage returns the package's storage file (content) with db's volume size, its one
// `storage:` line, size instead of from.
func (p pkgLayout) setStorage(db, from, size string) (string, error) {
	m := storagePattern.FindAllStringSubmatch(db, -1)
	if len(m) != 1 || m[0][2] != from {
		return "", fmt.Errorf("%s should have one `storage: %s` line; the demo expects the package as the sandbox committed it", p.storageFile, from)
	}
	return storagePattern.ReplaceAllString(db, "${1}"+size), nil
}

// The fleet repository's files that name the podinfo source.
const (
	sourcesFile = "hub/sources.yaml"
	rolloutFile = "hub/podinfo.yaml"
)

// The podinfo source of the fleet repository's hub/sources.yaml, and what --oci and --helm put in
// its place: an OCIRepository of the sandbox's registry (${oci_registry}, substituted like
// ${git_server}) that has source-controller verify each artifact's cosign signature with the
// public key of the Secret beside it. With --oci it follows the tag latest; with --helm, the
// highest chart version, and takes the chart's layer as it is (the .tgz helm-controller loads).
const (
	gitPodinfoSource = `apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata:
  name: podinfo
  namespace: fleet
spec:
  interval: 5s
  url: ${git_server}/podinfo.git
  ref:
    branch: main
`
	ociPodinfoSource = `apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata:
  name: podinfo
  namespace: fleet
spec:
  interval: 5s
  url: oci://${oci_registry}/podinfo
%s  # The sandbox's registry speaks plain HTTP on loopback.
  insecure: true
  verify:
    provider: cosign
    secretRef:
      name: ` + cosignSecret + `
`
	ociTagRef = `  ref:
    tag: ` + ociTag + `
`
	chartRef = `  ref:
    semver: "` + chartRange + `"
  # The chart's layer as it is, as helm push wrote it: the .tgz helm-controller loads.
  layerSelector:
    mediaType: application/vnd.cncf.helm.chart.content.v1.tar+gzip
    operation: copy
`
	chartRange = ">=0.1.0"

	rolloutGitSource = `  sourceRef:
    kind: GitRepository
    name: podinfo
`
	// rolloutPath and rolloutTemplate are the rollout's Kustomize package: with --helm the chart
	// is the artifact's root, and the template keeps only what a HelmRelease has.
	rolloutPath     = "  path: ./app\n"
	rolloutTemplate = `  template:
    interval: 1m
    timeout: 30s
    # A change of db's volumeClaimTemplates is applied by recreating the StatefulSet.
    force: true
    postBuild:
      substitute:
        logLevel: info
`
	rolloutChart = `  template:
    interval: 1m
    timeout: 30s
    # The release, its objects and Helm's record of it are in the namespace podinfo of each member.
    targetNamespace: ` + appNamespace + `
  # The package is a Helm chart: tidegate writes a HelmRelease per member, which helm-controller
  # installs. The values are set over the chart's values.yaml; values.schema.json checks them.
  chart:
    releaseName: ` + rolloutName + `
    values:
      logLevel: info
`
)

// fleetEdit replaces, in file, old (which must be there once) with new.
type fleetEdit struct{ file, old, new string }

// ociFleet rewrites the fleet repository's files for a package delivered from the sandbox's
// registry: the podinfo source becomes the OCIRepository above, the rollout's sourceRef names it,
// and a Secret holds the cosign public key (a public key: it may live in Git). With chart, the
// package is a Helm chart: the OCIRepository follows its versions and selects its layer, and the
// rollout installs it (spec.chart) instead of building ./app, without the template's
// Kustomize-only fields.
func ociFleet(files map[string]string, cosignPub []byte, chart bool) error {
	ref := ociTagRef
	if chart {
		ref = chartRef
	}
	secret := "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: " + cosignSecret + "\n  namespace: " + fleetNamespace +
		"\nstringData:\n  cosign.pub: |\n" + indent(string(cosignPub), "    ")
	edits := []fleetEdit{
		{sourcesFile, gitPodinfoSource, fmt.Sprintf(ociPodinfoSource, ref) + secret},
		{rolloutFile, rolloutGitSource, strings.Replace(rolloutGitSource, "GitRepository", "OCIRepository", 1)},
	}
	if chart {
		edits = append(edits, fleetEdit{rolloutFile, rolloutPath, ""}, fleetEdit{rolloutFile, rolloutTemplate, rolloutChart})
	}
	for _, e := range edits {
		if strings.Count(files[e.file], e.old) != 1 {
			return fmt.Errorf("the embedded fleet repository's %s changed: update ociFleet", e.file)
		}
	}
	for _, e := range edits {
		files[e.file] = strings.Replace(files[e.file], e.old, e.new, 1)
	}
	return nil
}
