package bridge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// httpServer serves /metrics, /healthz, /readyz and optionally pprof and
// the admin API (under /api/v1/), over TLS when http.tls_cert is set.
type httpServer struct {
	srv  *http.Server
	addr string
	done chan struct{}
}

func startHTTP(cfg HTTPConfig, log *slog.Logger, reg *prometheus.Registry, healthy func() bool, ready func() (bool, string), adminAPI http.Handler) (*httpServer, error) {
	mux := http.NewServeMux()
	if adminAPI != nil {
		mux.Handle("/api/v1/", adminAPI)
	}
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !healthy() {
			http.Error(w, "unhealthy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := ready()
		if !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, why)
	})
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("http.listen=%s: %w%s", cfg.Listen, err, inUseHint(err, listenerKey["http"]))
	}
	h := &httpServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, addr: ln.Addr().String(), done: make(chan struct{})}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("http.tls_cert=%s: %w", cfg.TLSCert, err)
		}
		h.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	go func() {
		defer close(h.done)
		var err error
		if h.srv.TLSConfig != nil {
			err = h.srv.ServeTLS(ln, "", "")
		} else {
			err = h.srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	return h, nil
}

func (h *httpServer) close(ctx context.Context) error {
	if err := h.srv.Shutdown(ctx); err != nil && ctx.Err() == nil {
		<-h.done
		return fmt.Errorf("http shutdown: %w", err)
	}
	// A request still open at the deadline (a scrape, a probe) is cut: the
	// shutdown is bounded, and nothing an HTTP client was promised is lost.
	_ = h.srv.Close()
	<-h.done
	return nil
}
