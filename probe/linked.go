package probe

import (
	"context"
	"fmt"
	"net"
	neturl "net/url"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/ferry-bridge/ferry/probe/link"
)

// startLink builds the emulated link of cfg.Link and a relay to each MQTT
// broker of the run; the probe's MQTT clients then connect through it.
func (r *runner) startLink() error {
	p, err := link.Parse(r.cfg.Link)
	if err != nil {
		return fmt.Errorf("%w: link=%q: %w", ErrConfig, r.cfg.Link, err)
	}
	brokers := []string{r.cfg.MQTT}
	if r.dir == Roundtrip && r.cfg.ReplyMQTT != r.cfg.MQTT {
		brokers = append(brokers, r.cfg.ReplyMQTT)
	}
	hosts := map[string]string{}
	for _, b := range brokers {
		u, err := neturl.Parse(b)
		if err != nil || (u.Scheme != "tcp" && u.Scheme != "mqtt") || u.Port() == "" {
			return fmt.Errorf("%w: link: broker %q: only tcp://host:port brokers can be put behind an emulated link", ErrConfig, b)
		}
		hosts[b] = u.Host
	}
	l, err := link.New(p, r.log)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrLink, err)
	}
	r.relays = map[string]string{}
	for b, host := range hosts {
		addr, err := l.Expose(host)
		if err != nil {
			l.Close()
			return fmt.Errorf("%w: %w", ErrLink, err)
		}
		r.relays[b] = addr
	}
	r.lnk = l
	return nil
}

// opener returns how the run's MQTT clients reach url: nil (directly)
// without a link, else through the link's relay to url.
func (r *runner) opener(url string) paho.OpenConnectionFunc {
	if r.lnk == nil {
		return nil
	}
	addr := r.relays[url]
	return func(_ *neturl.URL, o paho.ClientOptions) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), o.ConnectTimeout)
		defer cancel()
		return r.lnk.Dial(ctx, addr)
	}
}
