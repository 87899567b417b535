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
	releaseFile       = "app/kustomization.yaml"
	dbFile            = "app/db.yaml"
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
	root := path.Join("demo", repo)
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
		return nil, fmt.Errorf("reading the embedded demo repository %s: %w", repo, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("the embedded demo has no repository %s", repo)
	}
	if repo == repoFleet {
		files[clustersFile] = clustersYAML(members)
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

var (
	tagPattern     = regexp.MustCompile(`(?m)^([ \t]*newTag:[ \t]*)v[0-9]+[ \t]*$`)
	versionPattern = regexp.MustCompile(`(?m)^([ \t]*-[ \t]*version=)v[0-9]+[ \t]*$`)
	storagePattern = regexp.MustCompile(`(?m)^([ \t]*storage:[ \t]*)([0-9]+Gi)[ \t]*$`)
)

// setVersion returns the package's kustomization.yaml releasing version: its image tag and the
// version its ConfigMap reports.
func setVersion(kustomization, version string) (string, error) {
	if len(tagPattern.FindAllString(kustomization, -1)) != 1 || len(versionPattern.FindAllString(kustomization, -1)) != 1 {
		return "", fmt.Errorf("%s should have one `newTag: vN` and one `- version=vN` line to release %s; the demo expects the package as the sandbox committed it", releaseFile, version)
	}
	out := tagPattern.ReplaceAllString(kustomization, "${1}"+version)
	return versionPattern.ReplaceAllString(out, "${1}"+version), nil
}

// setStorage returns db.yaml with its one volume claim template asking for size instead of from.
func setStorage(db, from, size string) (string, error) {
	m := storagePattern.FindAllStringSubmatch(db, -1)
	if len(m) != 1 || m[0][2] != from {
		return "", fmt.Errorf("%s should have one `storage: %s` line; the demo expects the package as the sandbox committed it", dbFile, from)
	}
	return storagePattern.ReplaceAllString(db, "${1}"+size), nil
}

// The podinfo source of the fleet repository's hub/sources.yaml, and what --oci puts in its place:
// an OCIRepository of the sandbox's registry (${oci_registry}, substituted like ${git_server})
// that has source-controller verify each artifact's cosign signature with the public key of the
// Secret beside it.
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
  ref:
    tag: ` + ociTag + `
  # The sandbox's registry speaks plain HTTP on loopback.
  insecure: true
  verify:
    provider: cosign
    secretRef:
      name: ` + cosignSecret + `
`
	rolloutGitSource = `  sourceRef:
    kind: GitRepository
    name: podinfo
`
)

// ociFleet rewrites the fleet repository's files for a package delivered as OCI artifacts: the
// podinfo source becomes the OCIRepository above, the rollout's sourceRef names it, and a Secret
// holds the cosign public key (a public key: it may live in Git).
func ociFleet(files map[string]string, cosignPub []byte) error {
	sources, rollout := files["hub/sources.yaml"], files["hub/podinfo.yaml"]
	if !strings.Contains(sources, gitPodinfoSource) || !strings.Contains(rollout, rolloutGitSource) {
		return fmt.Errorf("the embedded fleet repository's podinfo source or rollout changed: update ociFleet")
	}
	secret := "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: " + cosignSecret + "\n  namespace: " + fleetNamespace +
		"\nstringData:\n  cosign.pub: |\n" + indent(string(cosignPub), "    ")
	files["hub/sources.yaml"] = strings.Replace(sources, gitPodinfoSource, ociPodinfoSource, 1) + secret
	files["hub/podinfo.yaml"] = strings.Replace(rollout, rolloutGitSource, strings.Replace(rolloutGitSource, "GitRepository", "OCIRepository", 1), 1)
	return nil
}
