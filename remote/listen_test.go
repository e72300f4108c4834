package remote

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Off loopback, TLS and authentication are both required; on loopback
// neither. A host-less address is loopback.
func TestListenChecks(t *testing.T) {
	cert, key := selfSigned(t)
	for _, tc := range []struct {
		cfg  ListenConfig
		want string // "" = accepted
	}{
		{ListenConfig{Addr: "127.0.0.1:0"}, ""},
		{ListenConfig{Addr: "[::1]:0"}, ""},
		{ListenConfig{Addr: "localhost:0"}, ""},
		{ListenConfig{Addr: ":0"}, ""},
		{ListenConfig{Addr: "0.0.0.0:0", Authenticated: true}, "requires TLS"},
		{ListenConfig{Addr: "[::]:0", Authenticated: true}, "requires TLS"},
		{ListenConfig{Addr: "build.example:7420", Authenticated: true}, "requires TLS"},
		{ListenConfig{Addr: "0.0.0.0:0", CertFile: cert, KeyFile: key}, "authentication"},
		{ListenConfig{Addr: "0.0.0.0:0", CertFile: cert, KeyFile: key, Authenticated: true}, ""},
		{ListenConfig{Addr: "127.0.0.1:0", CertFile: cert}, "both a certificate and a key"},
		{ListenConfig{Addr: "127.0.0.1:0", CertFile: key, KeyFile: key}, "TLS certificate"},
		{ListenConfig{Addr: "7420"}, "expected host:port"},
	} {
		l, err := Listen(tc.cfg)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		case tc.want == "requires TLS" && !errors.Is(err, ErrInsecure):
			t.Errorf("%+v: %v is not ErrInsecure", tc.cfg, err)
		}
		if l != nil {
			if host, _, _ := net.SplitHostPort(l.Addr().String()); tc.cfg.Addr == ":0" && host != "127.0.0.1" {
				t.Errorf(":0 listens on %s, want 127.0.0.1", host)
			}
			l.Close()
		}
	}
}

// Under TLS the endpoint is https, serves the SDK's initialize, and the
// token cookie is Secure.
func TestListenTLS(t *testing.T) {
	cert, key := selfSigned(t)
	l, err := Listen(ListenConfig{Addr: "127.0.0.1:0", CertFile: cert, KeyFile: key, Authenticated: true})
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(Options{Serve: newFakeAgent().Serve, Auth: tokenAuth, SecureCookies: l.TLS})
	go s.Serve(t.Context(), l)
	if !strings.HasPrefix(l.URL(), "https://") {
		t.Errorf("URL %s", l.URL())
	}
	pool := x509.NewCertPool()
	b, _ := os.ReadFile(cert)
	pool.AppendCertsFromPEM(b)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest("POST", l.URL()+"?token="+secret, strings.NewReader(initMsg))
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || len(resp.Cookies()) != 1 || !resp.Cookies()[0].Secure {
		t.Errorf("got %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (cert, key string) {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "acp-router test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, IsCA: true,
		BasicConstraintsValid: true, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return cert, key
}
