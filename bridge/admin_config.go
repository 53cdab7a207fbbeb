package bridge

import (
	"fmt"
	"os"
	"strings"
)

// validate checks the admin API's and the HTTP listener's TLS keys.
func (c HTTPConfig) validate(bad func(key string, value any, format string, args ...any)) {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("http.tls_cert", c.TLSCert, "http.tls_cert and http.tls_key go together")
	}
	if !c.adminOn() {
		return
	}
	if c.AdminToken != "" && c.AdminTokenFile != "" {
		bad("http.admin_token_file", c.AdminTokenFile, "set http.admin_token or http.admin_token_file, not both")
	}
	if c.Listen == "" {
		bad("http.admin_token", "(set)", "the admin API needs http.listen")
	} else if !isLoopback(c.Listen) && c.TLSCert == "" && !c.AdminInsecure {
		bad("http.listen", c.Listen, "the admin API on a non-loopback listener needs TLS (http.tls_cert, http.tls_key), or http.admin_insecure: true (a TLS proxy in front)")
	}
}

// adminToken is the configured token (read from http.admin_token_file).
func (c HTTPConfig) adminToken() (string, error) {
	if c.AdminTokenFile == "" {
		return c.AdminToken, nil
	}
	b, err := os.ReadFile(c.AdminTokenFile)
	if err != nil {
		return "", fmt.Errorf("http.admin_token_file=%s: %w", c.AdminTokenFile, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("http.admin_token_file=%s: the file is empty", c.AdminTokenFile)
	}
	return tok, nil
}
