package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// authorized reports whether r carries the bearer token. Both sides are
// hashed first, so the comparison takes the same time whatever the
// lengths, and it is constant-time.
func authorized(r *http.Request, token string) bool {
	h := r.Header.Get("Authorization")
	got, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || got == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// caller names who asked, for the action log: the remote address (the
// token is one; a proxy in front may say who, X-Forwarded-For).
func caller(r *http.Request) string {
	if f := r.Header.Get("X-Forwarded-For"); f != "" {
		return r.RemoteAddr + " for " + f
	}
	return r.RemoteAddr
}
