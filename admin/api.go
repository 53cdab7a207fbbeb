package admin

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Prefix is where the API is mounted.
const Prefix = "/api/v1/"

// DefaultLimit and MaxLimit bound a listing's page.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// actionTimeout bounds one action (the owner's answer through Kafka).
const actionTimeout = 10 * time.Second

//go:embed openapi.json
var openAPI []byte

// OpenAPI is the API's OpenAPI document.
func OpenAPI() []byte { return openAPI }

// API serves /api/v1/.
type API struct {
	b       Backend
	token   string
	log     *slog.Logger
	actions *prometheus.CounterVec
	mux     *http.ServeMux
}

// New builds the API with its bearer token (not empty) and registers its
// counter (ferry_admin_actions_total) with reg.
func New(b Backend, token string, log *slog.Logger, reg prometheus.Registerer) (*API, error) {
	if token == "" {
		return nil, errors.New("admin: empty token")
	}
	a := &API{b: b, token: token, log: log.With("component", "admin"), mux: http.NewServeMux(),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ferry_admin_actions_total",
			Help: "Admin API actions, by action and result (done, not_found, error)."}, []string{"action", "result"})}
	if err := reg.Register(a.actions); err != nil {
		return nil, fmt.Errorf("admin metrics: %w", err)
	}
	for _, r := range a.routes() {
		a.mux.HandleFunc(r.pattern, r.h)
	}
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path+" (see "+Prefix+"openapi.json)")
	})
	return a, nil
}

type route struct {
	pattern string // method and path, net/http's pattern
	h       http.HandlerFunc
}

// routes are the API's endpoints; openapi.json lists the same (a test
// checks both ways).
func (a *API) routes() []route {
	return []route{
		{"GET /api/v1/openapi.json", a.openapi},
		{"GET /api/v1/instances", a.instances},
		{"GET /api/v1/clients/{client_id}", a.client},
		{"POST /api/v1/clients/{client_id}/disconnect", a.disconnect},
		{"GET /api/v1/sessions", a.sessions},
		{"GET /api/v1/sessions/{client_id}", a.session},
		{"DELETE /api/v1/sessions/{client_id}", a.endSession},
		{"GET /api/v1/retained", a.retained},
		{"DELETE /api/v1/retained/{topic...}", a.clearRetained},
		{"GET /api/v1/route", a.route},
	}
}

// ServeHTTP checks the token, then routes.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !authorized(r, a.token) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="ferry-admin"`)
		writeError(w, http.StatusUnauthorized, "missing or wrong bearer token (Authorization: Bearer <http.admin_token>)")
		return
	}
	a.mux.ServeHTTP(w, r)
}

// apiError is every error's body.
type apiError struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apiError{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// fail answers err: 404 for ErrNotFound, else 503 (the cluster's state
// could not be read or acted on in time).
func fail(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrNotFound) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	writeError(w, http.StatusServiceUnavailable, err.Error())
}

func (a *API) openapi(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}

func (a *API) instances(w http.ResponseWriter, r *http.Request) {
	ins, err := a.b.Instances(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"instances": ins})
}

func (a *API) client(w http.ResponseWriter, r *http.Request) {
	c, err := a.b.Client(r.Context(), r.PathValue("client_id"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// page reads prefix, after and limit.
func page(w http.ResponseWriter, r *http.Request) (Page, bool) {
	q := r.URL.Query()
	p := Page{Prefix: q.Get("prefix"), After: q.Get("after"), Limit: DefaultLimit}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit=%q: must be 1..%d", s, MaxLimit))
			return p, false
		}
		p.Limit = n
	}
	return p, true
}

// next is a listing's cursor: the after of the next page ("" at the end).
func next(more bool, last string) string {
	if !more {
		return ""
	}
	return last
}

func (a *API) sessions(w http.ResponseWriter, r *http.Request) {
	p, ok := page(w, r)
	if !ok {
		return
	}
	var connected *bool
	if s := r.URL.Query().Get("connected"); s != "" {
		c, err := strconv.ParseBool(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("connected=%q: must be true or false", s))
			return
		}
		connected = &c
	}
	items, more := a.b.SessionPage(p, connected)
	last := ""
	if len(items) > 0 {
		last = items[len(items)-1].ClientID
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": items, "next": next(more, last)})
}

func (a *API) session(w http.ResponseWriter, r *http.Request) {
	s, err := a.b.Session(r.Context(), r.PathValue("client_id"))
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func (a *API) retained(w http.ResponseWriter, r *http.Request) {
	p, ok := page(w, r)
	if !ok {
		return
	}
	items, more := a.b.RetainedPage(p)
	last := ""
	if len(items) > 0 {
		last = items[len(items)-1].Topic
	}
	writeJSON(w, http.StatusOK, map[string]any{"retained": items, "next": next(more, last)})
}

func (a *API) route(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q := RouteQuery{MQTTTopic: v.Get("mqtt_topic"), KafkaTopic: v.Get("kafka_topic"), ClientID: v.Get("client_id")}
	if (q.MQTTTopic == "") == (q.KafkaTopic == "") {
		writeError(w, http.StatusBadRequest, "give one of mqtt_topic and kafka_topic")
		return
	}
	if s := v.Get("qos"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 2 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("qos=%q: must be 0, 1 or 2", s))
			return
		}
		q.QoS = byte(n)
	}
	if s := v.Get("retain"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("retain=%q: must be true or false", s))
			return
		}
		q.Retain = b
	}
	rt, err := a.b.Route(q)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rt)
}

func (a *API) disconnect(w http.ResponseWriter, r *http.Request) {
	a.act(w, r, "disconnect", r.PathValue("client_id"), a.b.Disconnect)
}

func (a *API) endSession(w http.ResponseWriter, r *http.Request) {
	a.act(w, r, "end_session", r.PathValue("client_id"), a.b.EndSession)
}

func (a *API) clearRetained(w http.ResponseWriter, r *http.Request) {
	a.act(w, r, "clear_retained", r.PathValue("topic"), a.b.ClearRetained)
}

// act runs one action, logs it with who asked, and counts it.
func (a *API) act(w http.ResponseWriter, r *http.Request, action, target string,
	do func(ctx context.Context, target, by string) (*ActionResult, error)) {
	by := caller(r)
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	res, err := do(ctx, target, by)
	result := "done"
	switch {
	case errors.Is(err, ErrNotFound):
		result = "not_found"
	case err != nil:
		result = "error"
	}
	a.actions.WithLabelValues(action, result).Inc()
	a.log.Info("admin action", "action", action, "target", target, "by", by, "result", result, "err", err)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
