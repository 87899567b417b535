package localfleet

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The media types of a Flux OCI artifact (what `flux push artifact` writes and source-controller
// pulls): a config of its own and one layer, the package as a gzipped tarball.
const (
	FluxConfigMediaType  types.MediaType = "application/vnd.cncf.flux.config.v1+json"
	FluxContentMediaType types.MediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"
)

// cosign's signature layout (cosign v2, which source-controller's cosign verifier reads when an
// artifact has no sigstore bundle): an image tagged sha256-<hex>.sig beside the signed manifest,
// one layer per signature holding the simple-signing payload, the signature in an annotation.
const (
	cosignSimpleSigningMediaType types.MediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	cosignSignatureAnnotation                    = "dev.cosignproject.cosign/signature"
	cosignSignatureType                          = "cosign container image signature"
)

// Registry is an OCI registry served from this process (go-containerregistry's, in memory, plain
// HTTP on loopback): Flux OCIRepositories on the hub pull from it with spec.insecure.
type Registry struct {
	// Host is the registry's address, 127.0.0.1:<port>.
	Host string
	srv  *http.Server
}

// StartRegistry starts an in-memory OCI registry on a free loopback port.
func StartRegistry() (*Registry, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting the OCI registry: %w", err)
	}
	srv := &http.Server{
		Handler:           registry.New(registry.Logger(log.New(io.Discard, "", 0))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(l) }()
	return &Registry{Host: l.Addr().String(), srv: srv}, nil
}

// Stop stops the registry; what it held is gone.
func (r *Registry) Stop() {
	if r != nil && r.srv != nil {
		_ = r.srv.Close()
	}
}

// URL is the address of repository in the registry as an OCIRepository's spec.url says it.
func (r *Registry) URL(repository string) string { return "oci://" + r.Host + "/" + repository }

// Artifact is a pushed package: its repository, the tag it was pushed to and its manifest digest.
type Artifact struct {
	Repository name.Repository
	Tag        string
	Digest     v1.Hash
}

// Revision is the artifact's revision as source-controller reports it for an OCIRepository that
// tracks the tag: "<tag>@sha256:<hex>".
func (a Artifact) Revision() string { return a.Tag + "@" + a.Digest.String() }

// PushArtifact pushes files (path → content) as a Flux OCI artifact to ref ("<host>/<repo>:<tag>",
// plain HTTP) and returns it. revision is recorded in the artifact's
// org.opencontainers.image.revision annotation, as `flux push artifact --revision` does. The
// tarball is reproducible: the same files give the same digest.
func PushArtifact(ref, revision string, files map[string]string) (Artifact, error) {
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return Artifact{}, fmt.Errorf("artifact reference %q: %w", ref, err)
	}
	layer, err := packageTarball(files)
	if err != nil {
		return Artifact{}, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: static.NewLayer(layer, FluxContentMediaType)})
	if err != nil {
		return Artifact{}, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, FluxConfigMediaType)
	img = mutate.Annotations(img, map[string]string{
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.source":   "https://tidegate.dev/localfleet",
	}).(v1.Image)
	return push(tag, img)
}

// push writes img to tag and returns it as an Artifact.
func push(tag name.Tag, img v1.Image) (Artifact, error) {
	digest, err := img.Digest()
	if err != nil {
		return Artifact{}, err
	}
	if err := remote.Write(tag, img); err != nil {
		return Artifact{}, fmt.Errorf("pushing %s: %w", tag, err)
	}
	return Artifact{Repository: tag.Repository, Tag: tag.TagStr(), Digest: digest}, nil
}

// packageTarball is files as a gzipped tarball with fixed times and modes, in path order.
func packageTarball(files map[string]string) ([]byte, error) {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, p := range paths {
		hdr := &tar.Header{Name: strings.TrimPrefix(p, "/"), Mode: 0o644, Size: int64(len(files[p])), Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(tw, files[p]); err != nil {
			return nil, err
		}
	}
	if err := errors.Join(tw.Close(), gz.Close()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// CosignKey is an ECDSA P-256 key pair of the kind cosign signs with. PublicPEM is the public
// key as `cosign generate-key-pair` writes cosign.pub (a PEM "PUBLIC KEY"): what an
// OCIRepository's spec.verify.secretRef holds under a key ending in ".pub".
type CosignKey struct {
	Private   *ecdsa.PrivateKey
	PublicPEM []byte
}

// NewCosignKey generates a key pair.
func NewCosignKey() (*CosignKey, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return cosignKeyOf(priv)
}

func cosignKeyOf(priv *ecdsa.PrivateKey) (*CosignKey, error) {
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return nil, err
	}
	return &CosignKey{Private: priv, PublicPEM: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})}, nil
}

// PrivatePEM is the private key as PKCS #8 PEM, for a sandbox to keep beside its public key.
func (k *CosignKey) PrivatePEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.Private)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseCosignKey reads a key PrivatePEM wrote.
func ParseCosignKey(privatePEM []byte) (*CosignKey, error) {
	block, _ := pem.Decode(privatePEM)
	if block == nil {
		return nil, errors.New("no PEM block in the cosign key")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the cosign key: %w", err)
	}
	priv, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the cosign key is a %T, not an ECDSA key", k)
	}
	return cosignKeyOf(priv)
}

// simpleSigning is the payload cosign signs: the signed manifest's digest and the repository it
// was signed in (containers/image's simple signing format, as cosign writes it).
type simpleSigning struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]any `json:"optional"`
}

// Sign signs the artifact's manifest digest with key and writes the signature where cosign does
// (`cosign sign --key --tlog-upload=false`: no transparency log): the image
// <repository>:sha256-<hex>.sig. Signing again adds nothing: the tag is replaced by this one
// signature.
func Sign(a Artifact, key *CosignKey) error {
	var p simpleSigning
	p.Critical.Identity.DockerReference = a.Repository.Name()
	p.Critical.Image.DockerManifestDigest = a.Digest.String()
	p.Critical.Type = cosignSignatureType
	payload, err := json.Marshal(p)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(payload)
	sig, err := key.Private.Sign(rand.Reader, sum[:], crypto.SHA256)
	if err != nil {
		return err
	}
	layer := static.NewLayer(payload, cosignSimpleSigningMediaType)
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:       layer,
		Annotations: map[string]string{cosignSignatureAnnotation: base64.StdEncoding.EncodeToString(sig)},
	})
	if err != nil {
		return err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	tag := a.Repository.Tag(a.Digest.Algorithm + "-" + a.Digest.Hex + ".sig")
	if err := remote.Write(tag, img); err != nil {
		return fmt.Errorf("writing the signature of %s: %w", a.Revision(), err)
	}
	return nil
}
