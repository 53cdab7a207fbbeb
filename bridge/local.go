package bridge

import (
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ferry-bridge/ferry/session"
)

// localListener names the inline clients that deliver pipelined QoS 1
// publishes to this broker's own subscribers.
const localListener = "ferry-local"

// localPublishers hands out inline clients that stand in for a publishing
// client when its QoS 1 publish, acknowledged by Kafka, is delivered to this
// broker's subscribers. mochi's shared inline client would make itself the
// origin of the message (so No Local would not hold) and mark it MQTT 3.1.1
// (so mochi would never expire it from an offline session); a stand-in
// carries the publisher's client id and protocol version, and OnPublish
// gives the packet back the time mochi received it (its expiry counts from
// then, not from Kafka's acknowledgement).
//
// Stand-ins are pooled: creating one allocates mochi's per-client state.
// Each is used by one goroutine at a time.
type localPublishers struct {
	free     chan *localPublisher
	byClient sync.Map // *mqtt.Client -> *localPublisher
}

type localPublisher struct {
	cl      *mqtt.Client
	created int64 // of the packet being delivered
	expiry  int64
}

func newLocalPublishers() *localPublishers {
	return &localPublishers{free: make(chan *localPublisher, 64)}
}

// deliverLocal delivers out, its record acknowledged by Kafka at c, to this
// broker's subscribers in the name of its publisher from.
func (h *hook) deliverLocal(from *mqtt.Client, out packets.Packet, c session.Coord) {
	lp := h.locals.get(h.server)
	lp.cl.ID = from.ID
	lp.cl.Properties.ProtocolVersion = from.Properties.ProtocolVersion
	lp.created, lp.expiry = out.Created, out.Expiry
	out.PacketID = 1 // must be set for QoS > 0; subscribers get their own
	// The alias was resolved on the publisher's connection.
	out.Properties.TopicAlias, out.Properties.TopicAliasFlag = 0, false
	if h.inj != nil {
		h.inj.Begin(lp.cl.ID, c, out.TopicName) // positions of persistent subscribers
	}
	if err := h.server.InjectPacket(lp.cl, out); err != nil {
		h.log.Debug("local delivery", "topic", out.TopicName, "err", err)
	}
	if h.inj != nil {
		h.inj.End(lp.cl.ID)
	}
	h.locals.put(lp)
}

func (l *localPublishers) get(s *mqtt.Server) *localPublisher {
	select {
	case lp := <-l.free:
		return lp
	default:
	}
	lp := &localPublisher{cl: s.NewClient(nil, localListener, "", true)}
	l.byClient.Store(lp.cl, lp)
	return lp
}

func (l *localPublishers) put(lp *localPublisher) {
	select {
	case l.free <- lp:
	default:
		l.byClient.Delete(lp.cl)
	}
}

// restore runs in OnPublish for inline clients: a stand-in's packet gets
// back the time mochi first received it (mochi has just set it to now).
func (l *localPublishers) restore(cl *mqtt.Client, pk *packets.Packet) {
	if cl.Net.Listener != localListener {
		return
	}
	if v, ok := l.byClient.Load(cl); ok {
		lp := v.(*localPublisher)
		pk.Created, pk.Expiry = lp.created, lp.expiry
	}
}
