package faultproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config returns a copy of cfg (a client of the proxy's API server) that reaches it through the
// proxy, and registers cfg's client certificate, if it has one, so the proxy passes the client on
// with it.
func (p *Proxy) Config(cfg *rest.Config) (*rest.Config, error) {
	cert, key := cfg.CertData, cfg.KeyData
	if len(cert) == 0 && cfg.CertFile != "" {
		var err error
		if cert, err = os.ReadFile(cfg.CertFile); err != nil {
			return nil, fmt.Errorf("fault proxy: %w", err)
		}
		if key, err = os.ReadFile(cfg.KeyFile); err != nil {
			return nil, fmt.Errorf("fault proxy: %w", err)
		}
	}
	if len(cert) > 0 {
		if err := p.register(cert, key); err != nil {
			return nil, err
		}
	}
	out := rest.CopyConfig(cfg)
	out.Host = p.URL
	out.TLSClientConfig.CAData, out.TLSClientConfig.CAFile = p.CA(), ""
	out.TLSClientConfig.ServerName, out.TLSClientConfig.Insecure = "", false
	out.TLSClientConfig.CertData, out.TLSClientConfig.KeyData = cert, key
	out.TLSClientConfig.CertFile, out.TLSClientConfig.KeyFile = "", ""
	return out, nil
}

// KubeConfig returns kubeconfig with its current context's cluster pointed at the proxy (the
// proxy's address and CA) and registers that context's client certificate, as Config does.
func (p *Proxy) KubeConfig(kubeconfig []byte) ([]byte, error) {
	kc, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("fault proxy: reading the kubeconfig: %w", err)
	}
	ctx, ok := kc.Contexts[kc.CurrentContext]
	if !ok || kc.Clusters[ctx.Cluster] == nil {
		return nil, fmt.Errorf("fault proxy: the kubeconfig's current context %q names no cluster", kc.CurrentContext)
	}
	if user := kc.AuthInfos[ctx.AuthInfo]; user != nil && len(user.ClientCertificateData) > 0 {
		if err := p.register(user.ClientCertificateData, user.ClientKeyData); err != nil {
			return nil, err
		}
	}
	cluster := kc.Clusters[ctx.Cluster].DeepCopy()
	cluster.Server = p.URL
	cluster.CertificateAuthorityData, cluster.CertificateAuthority = p.CA(), ""
	cluster.TLSServerName, cluster.InsecureSkipTLSVerify = "", false
	kc.Clusters[ctx.Cluster] = cluster
	return clientcmd.Write(*kc)
}

// servingCert returns a self-signed certificate for 127.0.0.1 and localhost, and its PEM, which
// clients trust as the CA.
func servingCert() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "tidegate fault proxy"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("fault proxy: serving certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
