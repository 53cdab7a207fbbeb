package bridge

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAdminAPINeedsTLSOffLoopback: the admin API on a non-loopback HTTP
// listener is refused without TLS, naming http.listen, unless
// http.admin_insecure says so; on loopback, or with TLS, it is accepted; a
// token and a token file together are refused; the file's token is read
// without its surrounding white space.
func TestAdminAPINeedsTLSOffLoopback(t *testing.T) {
	base := DefaultConfig()
	base.HTTP.AdminToken = "t0ken"
	if err := base.Validate(); err != nil {
		t.Fatalf("admin API on the loopback default: %v", err)
	}
	open := base
	open.HTTP.Listen = "0.0.0.0:8080"
	err := open.Validate()
	var fe *FieldError
	if err == nil || !errors.As(err, &fe) || fe.Key != "http.listen" || !strings.Contains(err.Error(), "http.admin_insecure") {
		t.Fatalf("admin API on 0.0.0.0 without TLS: %v, want an http.listen error naming http.admin_insecure", err)
	}
	insecure := open
	insecure.HTTP.AdminInsecure = true
	tls := open
	tls.HTTP.TLSCert, tls.HTTP.TLSKey = "cert.pem", "key.pem"
	noAdmin := open
	noAdmin.HTTP.AdminToken = ""
	for name, cfg := range map[string]Config{"admin_insecure": insecure, "tls": tls, "no token": noAdmin} {
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	half := base
	half.HTTP.TLSCert = "cert.pem"
	if err := half.Validate(); err == nil || !strings.Contains(err.Error(), "http.tls_cert") {
		t.Errorf("http.tls_cert without http.tls_key: %v", err)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("  from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	both := base
	both.HTTP.AdminTokenFile = file
	if err := both.Validate(); err == nil || !strings.Contains(err.Error(), "http.admin_token_file") {
		t.Errorf("token and token file: %v", err)
	}
	fromFile := base
	fromFile.HTTP.AdminToken, fromFile.HTTP.AdminTokenFile = "", file
	if tok, err := fromFile.HTTP.adminToken(); err != nil || tok != "from-file" {
		t.Errorf("token from file: %q, %v", tok, err)
	}
}

// TestAdminAPIOverTLS: with http.tls_cert and http.tls_key the listener
// serves HTTPS, the admin API with it; a plain HTTP request gets nothing.
func TestAdminAPIOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, dir, "ca")
	cert, key := ca.issue(t, dir, "server", true)
	cfg := testConfig("")
	cfg.HTTP.Listen, cfg.HTTP.TLSCert, cfg.HTTP.TLSKey, cfg.HTTP.AdminToken = "127.0.0.1:0", cert, key, "tls-token"
	b := startBridge(t, cfg)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	cl := http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequest("GET", "https://"+b.HTTPAddr()+"/api/v1/instances", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tls-token")
	res, err := cl.Do(req)
	if err != nil {
		t.Fatalf("GET over TLS: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET over TLS: %s", res.Status)
	}
	if res, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + b.HTTPAddr() + "/api/v1/instances"); err == nil {
		res.Body.Close()
		if res.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP served the admin API")
		}
	}
}
