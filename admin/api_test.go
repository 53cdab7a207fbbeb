package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// stubBackend answers every read with one fixed object.
type stubBackend struct{}

func (stubBackend) Instances(context.Context) ([]Instance, error) { return []Instance{{ID: "a"}}, nil }
func (stubBackend) Client(_ context.Context, id string) (*Client, error) {
	return &Client{ClientID: id}, nil
}
func (stubBackend) SessionPage(Page, *bool) ([]SessionItem, bool) { return nil, false }
func (stubBackend) Session(context.Context, string) (*Session, error) {
	return nil, ErrNotFound
}
func (stubBackend) RetainedPage(Page) ([]RetainedItem, bool) { return nil, false }
func (stubBackend) Route(RouteQuery) (*Route, error)         { return &Route{}, nil }
func (stubBackend) Disconnect(context.Context, string, string) (*ActionResult, error) {
	return nil, ErrNotFound
}
func (stubBackend) EndSession(context.Context, string, string) (*ActionResult, error) {
	return nil, ErrNotFound
}
func (stubBackend) ClearRetained(_ context.Context, topic, _ string) (*ActionResult, error) {
	return &ActionResult{Action: "clear_retained", Target: topic, Done: true}, nil
}

func newTestAPI(t *testing.T) *API {
	t.Helper()
	a, err := New(stubBackend{}, "s3cret", slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func call(a *API, method, path, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	a.ServeHTTP(w, r)
	return w
}

// TestTokenRequired: without the bearer token, or with a wrong one, every
// endpoint answers 401 with a JSON error and nothing of the cluster; a
// path the API does not have answers 404 with a JSON error.
func TestTokenRequired(t *testing.T) {
	a := newTestAPI(t)
	for _, tc := range []struct {
		method, path, auth string
		code               int
	}{
		{"GET", "/api/v1/instances", "", 401},
		{"GET", "/api/v1/instances", "Bearer wrong", 401},
		{"GET", "/api/v1/instances", "Bearer s3cret-and-more", 401},
		{"GET", "/api/v1/instances", "s3cret", 401},
		{"POST", "/api/v1/clients/x/disconnect", "Bearer s3cre", 401},
		{"GET", "/api/v1/instances", "Bearer s3cret", 200},
		{"GET", "/api/v1/nothing", "Bearer s3cret", 404},
		{"GET", "/api/v1/sessions/unknown", "Bearer s3cret", 404},
		{"GET", "/api/v1/sessions?limit=0", "Bearer s3cret", 400},
		{"GET", "/api/v1/route", "Bearer s3cret", 400},
	} {
		w := call(a, tc.method, tc.path, tc.auth)
		if w.Code != tc.code {
			t.Errorf("%s %s (%q): %d, want %d: %s", tc.method, tc.path, tc.auth, w.Code, tc.code, w.Body)
			continue
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q, want application/json", tc.method, tc.path, ct)
		}
		var e apiError
		if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
			t.Errorf("%s %s: body is not JSON: %v: %s", tc.method, tc.path, err, w.Body)
		}
		if tc.code >= 400 && e.Error == "" {
			t.Errorf("%s %s: %d without an error message: %s", tc.method, tc.path, w.Code, w.Body)
		}
		if tc.code == 401 && strings.Contains(w.Body.String(), `"a"`) {
			t.Errorf("%s %s: 401 shows the cluster: %s", tc.method, tc.path, w.Body)
		}
	}
}

// TestRetainedTopicKeepsItsSlashes: DELETE /api/v1/retained/a/b/c clears
// the topic a/b/c.
func TestRetainedTopicKeepsItsSlashes(t *testing.T) {
	w := call(newTestAPI(t), "DELETE", "/api/v1/retained/a/b/c", "Bearer s3cret")
	var res ActionResult
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || res.Target != "a/b/c" {
		t.Fatalf("%d %s: target %q, want a/b/c", w.Code, w.Body, res.Target)
	}
}

// TestOpenAPIMatchesRoutes: openapi.json documents every route the API
// serves and no other, and docs/openapi.json is the same document.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			documented[strings.ToUpper(method)+" "+path] = true
		}
	}
	served := map[string]bool{}
	for _, r := range newTestAPI(t).routes() {
		served[strings.ReplaceAll(r.pattern, "...}", "}")] = true
	}
	for r := range served {
		if !documented[r] {
			t.Errorf("%s is served, not in openapi.json", r)
		}
	}
	for r := range documented {
		if !served[r] {
			t.Errorf("%s is in openapi.json, not served", r)
		}
	}
	docs, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(docs, openAPI) {
		t.Error("docs/openapi.json differs from admin/openapi.json: cp admin/openapi.json docs/")
	}
}
