package localfleet

import (
	"archive/tar"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// A package pushed to the in-process registry comes back from it as a Flux OCI artifact: the
// manifest tagged, of Flux's media types, its one layer the files; the same files push to the same
// digest. Its signature sits where cosign keeps one (sha256-<hex>.sig), over a payload naming the
// manifest digest, and checks out with the public key as cosign.pub holds it.
func TestRegistryPushAndSign(t *testing.T) {
	reg, err := StartRegistry()
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	files := map[string]string{"app/kustomization.yaml": "resources: [cm.yaml]\n", "app/cm.yaml": "kind: ConfigMap\n"}
	a, err := PushArtifact(reg.Host+"/podinfo:latest", "v1", files)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := PushArtifact(reg.Host+"/podinfo:v1", "v1", files); err != nil || again.Digest != a.Digest {
		t.Fatalf("the same files pushed again: %v, digest %s, want %s", err, again.Digest, a.Digest)
	}
	if want := "latest@" + a.Digest.String(); a.Revision() != want {
		t.Fatalf("revision %q, want %q", a.Revision(), want)
	}

	_, layer := pulled(t, reg.Host+"/podinfo:latest", FluxConfigMediaType, FluxContentMediaType)
	got := untarred(t, layer)
	for p, c := range files {
		if got[p] != c {
			t.Errorf("%s in the artifact: %q, want %q", p, got[p], c)
		}
	}

	key, err := NewCosignKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := Sign(a, key); err != nil {
		t.Fatal(err)
	}
	sigRef, err := name.ParseReference(reg.Host+"/podinfo:sha256-"+a.Digest.Hex+".sig", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	sigImg, err := remote.Image(sigRef)
	if err != nil {
		t.Fatalf("no signature where cosign looks for it: %v", err)
	}
	sm, err := sigImg.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	sigLayers, err := sigImg.Layers()
	if err != nil || len(sigLayers) != 1 || len(sm.Layers) != 1 {
		t.Fatalf("signature layers: %v, %d", err, len(sm.Layers))
	}
	rc, err := sigLayers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := io.ReadAll(rc)
	var p simpleSigning
	if err := json.Unmarshal(payload, &p); err != nil || p.Critical.Image.DockerManifestDigest != a.Digest.String() {
		t.Fatalf("payload %s: %v", payload, err)
	}
	sig, err := base64.StdEncoding.DecodeString(sm.Layers[0].Annotations[cosignSignatureAnnotation])
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(key.PublicPEM)
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(payload)
	if !ecdsa.VerifyASN1(pub.(*ecdsa.PublicKey), sum[:], sig) {
		t.Fatal("the signature does not verify with the public key")
	}
	other, _ := NewCosignKey()
	if ecdsa.VerifyASN1(&other.Private.PublicKey, sum[:], sig) {
		t.Fatal("the signature verifies with another key")
	}

	// The private key survives a round trip through its PEM.
	pemKey, err := key.PrivatePEM()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseCosignKey(pemKey)
	if err != nil || string(back.PublicPEM) != string(key.PublicPEM) {
		t.Fatalf("parsing the key back: %v", err)
	}
}

// pulled pulls the image at ref, checks that its config and its one layer are of the media types
// given, and returns it and its layer.
func pulled(t *testing.T, ref string, config, layer types.MediaType) (v1.Image, v1.Layer) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != config || len(m.Layers) != 1 || m.Layers[0].MediaType != layer {
		t.Fatalf("manifest of %s: config %s, layers %+v", ref, m.Config.MediaType, m.Layers)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	return img, layers[0]
}

func untarred(t *testing.T, l interface{ Compressed() (io.ReadCloser, error) }) map[string]string {
	t.Helper()
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	gz, err := gzip.NewReader(rc)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = string(b)
	}
}
