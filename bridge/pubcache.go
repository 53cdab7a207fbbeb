package bridge

import "github.com/ferry-bridge/ferry/topicmap"

// pubCache is what the records of one connection's publishes can share: its
// last forward route and the bytes of that topic and of its client id. A
// device publishes to the same few topics, and mapping one (the rule lookup,
// the Kafka name, the key) and copying the topic and client id into headers
// cost a tenth of the bridge's CPU under load. One entry per connection, so
// memory stays bounded however many topics a fleet uses. Only the
// connection's read goroutine (mochi's OnPublish) uses it. What it hands out
// is shared by many records: the producer reads keys and header values,
// never writes them.
type pubCache struct {
	topic      string
	route      topicmap.Route
	topicBytes []byte
	ok         bool

	id      string
	idBytes []byte
}

// forward is tm.Forward(topic), answered from the cache when topic is the
// last one that mapped. Errors are not cached. A nil cache asks tm.
func (c *pubCache) forward(tm *topicmap.Map, topic string) (topicmap.Route, error) {
	if c == nil {
		return tm.Forward(topic)
	}
	if c.ok && c.topic == topic {
		return c.route, nil
	}
	r, err := tm.Forward(topic)
	if err != nil {
		return r, err
	}
	c.topic, c.route, c.topicBytes, c.ok = topic, r, []byte(topic), true
	return r, nil
}

// bytes are topic and clientID as bytes, shared with earlier records where
// they are the same (a nil field: the caller copies).
func (c *pubCache) bytes(topic, clientID string) topicmap.StandardBytes {
	var sb topicmap.StandardBytes
	if c.ok && c.topic == topic {
		sb.Topic = c.topicBytes
	}
	if clientID != "" {
		if c.idBytes == nil || c.id != clientID {
			c.id, c.idBytes = clientID, []byte(clientID)
		}
		sb.ClientID = c.idBytes
	}
	return sb
}
