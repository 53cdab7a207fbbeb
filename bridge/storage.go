package bridge

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/storage"
	"github.com/mochi-mqtt/server/v2/packets"
)

// store is Ferry's durable session store: a mochi storage hook on an
// embedded Pebble database in storage.dir. It keeps what MQTT says a session
// is (the client, its subscriptions, its in-flight and queued QoS 1/2
// messages) for every persistent session (v3.1.1 clean session false, v5
// session expiry > 0), and every retained message, across restarts and
// kill -9.
//
// Why not mochi's own pebble hook (hooks/storage/pebble): it can neither
// restore delivery order nor say when its writes are on disk. mochi resends a
// session's in-flight messages sorted by their creation second, so order is
// lost; Ferry stores each in-flight message with its delivery sequence
// (inflightOrder) and restores that order. And the reverse path must know
// that what it delivered is durable before it commits the Kafka offset:
// writes go to Pebble without fsync (memtable and write-ahead log, about a
// microsecond each) and sync() fsyncs the log once for everything written
// before it — a group commit, run by the reverse committer just before it
// marks offsets. "Committed to Kafka" therefore implies "in the fsynced log".
// storeModeSync (fsync every write) and storeModeNoSync (never fsync) exist
// for the durability benchmark only (BenchmarkStore).
//
// Clean sessions are not stored: MQTT ends them with the connection, so after
// a restart there is nothing to resume. Values are JSON in mochi's storage
// types (storage.Client, storage.Subscription, storage.Message).
type store struct {
	mqtt.HookBase
	log   *slog.Logger
	order *inflightOrder
	mode  storeMode
	wo    *pebble.WriteOptions

	mu sync.RWMutex // guards db against Stop
	db *pebble.DB

	// In-flight messages are buffered (storeModeGroup): most are
	// acknowledged before the next sync and never touch Pebble; the rest go
	// in one batch. writeMu orders a batch against forget's range delete.
	writeMu sync.Mutex
	bufMu   sync.Mutex
	buf     map[string]map[uint16]*storedInflight // client -> packet id -> message, nil: delete
	bufLen  int

	knownMu sync.Mutex
	known   map[string]struct{} // client ids with a stored session (so clean sessions cost nothing)
}

// storeBufferMax bounds the buffered in-flight writes between syncs.
const storeBufferMax = 16384

type storeMode int

const (
	storeModeGroup  storeMode = iota // NoSync writes, fsync in sync() (the bridge's mode)
	storeModeSync                    // fsync every write (benchmark only)
	storeModeNoSync                  // never fsync (benchmark only)
)

// Key prefixes. A client id or topic follows; in-flight keys end with the
// packet id (2 bytes, big endian) after a 0 byte.
const (
	keyClient   = "c/"
	keySub      = "s/"
	keyRetained = "r/"
	keyInflight = "i/"
	keyAlive    = "m/alive"
)

// storedInflight is one in-flight message with its delivery sequence.
type storedInflight struct {
	Seq uint64          `json:"seq"`
	Msg storage.Message `json:"msg"`
}

func openStore(dir string, mode storeMode, log *slog.Logger, order *inflightOrder) (*store, error) {
	s := &store{log: log.With("component", "storage"), order: order, mode: mode, wo: pebble.NoSync,
		buf: make(map[string]map[uint16]*storedInflight), known: make(map[string]struct{})}
	if mode == storeModeSync {
		s.wo = pebble.Sync
	}
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{s.log}})
	if err != nil {
		return nil, fmt.Errorf("storage.dir=%s: open: %w", dir, err)
	}
	s.db = db
	return s, nil
}

func (s *store) ID() string { return "ferry-storage" }

func (s *store) Provides(b byte) bool {
	return bytes.Contains([]byte{
		mqtt.OnSessionEstablished, mqtt.OnDisconnect, mqtt.OnSubscribed, mqtt.OnUnsubscribed,
		mqtt.OnRetainMessage, mqtt.OnWillSent, mqtt.OnQosPublish, mqtt.OnQosComplete, mqtt.OnQosDropped,
		mqtt.OnClientExpired, mqtt.OnRetainedExpired,
		mqtt.StoredClients, mqtt.StoredInflightMessages, mqtt.StoredRetainedMessages, mqtt.StoredSubscriptions,
	}, []byte{b})
}

// Stop writes what is buffered, syncs and closes the database (mochi calls
// it from Server.Close, the bridge once more after it). Writes after it are
// ignored.
func (s *store) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.db == nil {
		return nil
	}
	err := s.writeBufferLocked()
	if err == nil && s.mode != storeModeNoSync {
		err = s.db.LogData(nil, pebble.Sync)
	}
	err = errors.Join(err, s.db.Close())
	s.db = nil
	return err
}

// sync makes every write before it durable (one fsync of the log). It is
// the group commit the reverse path runs before it marks offsets.
func (s *store) sync() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return errors.New("storage closed")
	}
	if s.mode == storeModeNoSync {
		return nil
	}
	if err := s.writeBufferLocked(); err != nil {
		return fmt.Errorf("storage sync: %w", err)
	}
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("storage sync: %w", err)
	}
	return nil
}

func (s *store) set(key []byte, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("storage encode", "key", string(key), "err", err)
		return
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return
	}
	if err := s.db.Set(key, b, s.wo); err != nil {
		s.log.Error("storage write", "key", string(key), "err", err)
	}
}

func (s *store) del(key []byte) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return
	}
	if err := s.db.Delete(key, s.wo); err != nil {
		s.log.Error("storage delete", "key", string(key), "err", err)
	}
}

// scan calls fn for every key with prefix, in key order.
func (s *store) scan(prefix string, fn func(k, v []byte)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return errors.New("storage closed")
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte(prefix), UpperBound: prefixEnd([]byte(prefix))})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		fn(it.Key(), it.Value())
	}
	return it.Close()
}

func prefixEnd(p []byte) []byte {
	end := slices.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

func clientKey(id string) []byte { return []byte(keyClient + id) }

// clientPrefix is the prefix of a client's keys under kind (keySub, keyInflight).
func clientPrefix(kind, id string) []byte { return append([]byte(kind+id), 0) }

func inflightKey(id string, pid uint16) []byte {
	return binary.BigEndian.AppendUint16(clientPrefix(keyInflight, id), pid)
}

// persistent reports whether cl's session outlives its connection.
func persistent(cl *mqtt.Client) bool {
	if cl.Net.Inline {
		return false
	}
	if cl.Properties.ProtocolVersion == 5 {
		return cl.Properties.Props.SessionExpiryInterval > 0
	}
	return !cl.Properties.Clean
}

func (s *store) OnSessionEstablished(cl *mqtt.Client, _ packets.Packet) {
	if persistent(cl) {
		s.putClient(cl)
	} else {
		// A clean start ends any stored session of this id.
		s.forget(cl.ID)
	}
}

func (s *store) OnWillSent(cl *mqtt.Client, _ packets.Packet) {
	if persistent(cl) {
		s.putClient(cl)
	}
}

func (s *store) OnDisconnect(cl *mqtt.Client, _ error, expire bool) {
	if cl.IsTakenOver() {
		return // the new connection owns the session now
	}
	if expire || !persistent(cl) {
		s.forget(cl.ID)
		return
	}
	s.putClient(cl)
}

func (s *store) OnClientExpired(cl *mqtt.Client) { s.forget(cl.ID) }

// forget deletes a client's stored session, if any: record,
// subscriptions, in-flight.
func (s *store) forget(id string) {
	s.knownMu.Lock()
	_, ok := s.known[id]
	delete(s.known, id)
	s.knownMu.Unlock()
	if !ok {
		return
	}
	// Lock order everywhere: mu (read), then writeMu.
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.bufMu.Lock()
	s.bufLen -= len(s.buf[id])
	delete(s.buf, id)
	s.bufMu.Unlock()
	for _, err := range []error{
		s.db.Delete(clientKey(id), s.wo),
		s.db.DeleteRange(clientPrefix(keySub, id), prefixEnd(clientPrefix(keySub, id)), s.wo),
		s.db.DeleteRange(clientPrefix(keyInflight, id), prefixEnd(clientPrefix(keyInflight, id)), s.wo),
	} {
		if err != nil {
			s.log.Error("storage delete session", "client", id, "err", err)
		}
	}
}

func (s *store) putClient(cl *mqtt.Client) {
	s.knownMu.Lock()
	s.known[cl.ID] = struct{}{}
	s.knownMu.Unlock()
	props := cl.Properties.Props.Copy(false)
	s.set(clientKey(cl.ID), &storage.Client{
		ID: cl.ID, T: storage.ClientKey, Remote: cl.Net.Remote, Listener: cl.Net.Listener,
		Username: cl.Properties.Username, Clean: cl.Properties.Clean, ProtocolVersion: cl.Properties.ProtocolVersion,
		Properties: storage.ClientProperties{
			SessionExpiryInterval:     props.SessionExpiryInterval,
			SessionExpiryIntervalFlag: props.SessionExpiryIntervalFlag,
			AuthenticationMethod:      props.AuthenticationMethod,
			AuthenticationData:        props.AuthenticationData,
			RequestProblemInfo:        props.RequestProblemInfo,
			RequestProblemInfoFlag:    props.RequestProblemInfoFlag,
			RequestResponseInfo:       props.RequestResponseInfo,
			ReceiveMaximum:            props.ReceiveMaximum,
			TopicAliasMaximum:         props.TopicAliasMaximum,
			User:                      props.User,
			MaximumPacketSize:         props.MaximumPacketSize,
		},
		Will: storage.ClientWill(cl.Properties.Will),
	})
}

func (s *store) OnSubscribed(cl *mqtt.Client, pk packets.Packet, codes []byte) {
	if !persistent(cl) {
		return
	}
	for i, f := range pk.Filters {
		if i < len(codes) && codes[i] >= 0x80 {
			continue // refused
		}
		qos := f.Qos
		if i < len(codes) {
			qos = codes[i]
		}
		s.set(append(clientPrefix(keySub, cl.ID), f.Filter...), &storage.Subscription{
			T: storage.SubscriptionKey, Client: cl.ID, Filter: f.Filter, Qos: qos, Identifier: f.Identifier,
			NoLocal: f.NoLocal, RetainHandling: f.RetainHandling, RetainAsPublished: f.RetainAsPublished,
		})
	}
}

func (s *store) OnUnsubscribed(cl *mqtt.Client, pk packets.Packet) {
	if cl.IsTakenOver() || !persistent(cl) {
		return // a session switching to clean is forgotten whole
	}
	for _, f := range pk.Filters {
		s.del(append(clientPrefix(keySub, cl.ID), f.Filter...))
	}
}

// OnRetainMessage stores or (r == -1: empty payload) clears a topic's
// retained message.
func (s *store) OnRetainMessage(cl *mqtt.Client, pk packets.Packet, r int64) {
	key := []byte(keyRetained + pk.TopicName)
	if r == -1 {
		s.del(key)
		return
	}
	s.set(key, toStored(cl.ID, pk))
}

func (s *store) OnRetainedExpired(topic string) { s.del([]byte(keyRetained + topic)) }

// OnQosPublish stores an in-flight message of a persistent session with its
// delivery sequence (assigned by inflightOrder, whose hook runs first).
func (s *store) OnQosPublish(cl *mqtt.Client, pk packets.Packet, _ int64, _ int) {
	if !persistent(cl) {
		return
	}
	s.buffer(cl.ID, pk.PacketID, &storedInflight{Seq: s.order.seqOf(cl.ID, pk.PacketID), Msg: *toStored(cl.ID, pk)})
}

// OnQosComplete deletes an acknowledged (or dropped) in-flight message. A
// taken-over session's messages moved to its new connection: kept.
func (s *store) OnQosComplete(cl *mqtt.Client, pk packets.Packet) {
	if persistent(cl) && !cl.IsTakenOver() {
		s.buffer(cl.ID, pk.PacketID, nil)
	}
}

func (s *store) OnQosDropped(cl *mqtt.Client, pk packets.Packet) { s.OnQosComplete(cl, pk) }

// buffer records an in-flight write (m nil: delete). Outside storeModeGroup
// it is written at once.
func (s *store) buffer(id string, pid uint16, m *storedInflight) {
	if s.mode != storeModeGroup {
		if m == nil {
			s.del(inflightKey(id, pid))
		} else {
			s.set(inflightKey(id, pid), m)
		}
		return
	}
	s.bufMu.Lock()
	c := s.buf[id]
	if c == nil {
		c = make(map[uint16]*storedInflight)
		s.buf[id] = c
	}
	if _, ok := c[pid]; !ok {
		s.bufLen++
	}
	c[pid] = m
	full := s.bufLen >= storeBufferMax
	s.bufMu.Unlock()
	if full {
		s.writeBuffer()
	}
}

// writeBuffer writes the buffered in-flight changes in one Pebble batch
// (not synced).
func (s *store) writeBuffer() {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return
	}
	if err := s.writeBufferLocked(); err != nil {
		s.log.Error("storage write", "err", err)
	}
}

// writeBufferLocked: s.mu held (read or write), db open.
func (s *store) writeBufferLocked() error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.bufMu.Lock()
	buf := s.buf
	if s.bufLen == 0 {
		s.bufMu.Unlock()
		return nil
	}
	s.buf, s.bufLen = make(map[string]map[uint16]*storedInflight, len(buf)), 0
	s.bufMu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	for id, c := range buf {
		for pid, m := range c {
			key := inflightKey(id, pid)
			if m == nil {
				if err := b.Delete(key, nil); err != nil {
					return err
				}
				continue
			}
			v, err := json.Marshal(m)
			if err != nil {
				return err
			}
			if err := b.Set(key, v, nil); err != nil {
				return err
			}
		}
	}
	return b.Commit(pebble.NoSync)
}

func toStored(client string, pk packets.Packet) *storage.Message {
	props := pk.Properties.Copy(false)
	return &storage.Message{
		Client: client, Origin: pk.Origin, PacketID: pk.PacketID, FixedHeader: pk.FixedHeader,
		TopicName: pk.TopicName, Payload: pk.Payload, Created: pk.Created,
		Properties: storage.MessageProperties{
			PayloadFormat: props.PayloadFormat, PayloadFormatFlag: props.PayloadFormatFlag,
			MessageExpiryInterval: props.MessageExpiryInterval, ContentType: props.ContentType,
			ResponseTopic: props.ResponseTopic, CorrelationData: props.CorrelationData,
			SubscriptionIdentifier: props.SubscriptionIdentifier, User: props.User,
		},
	}
}

func (s *store) StoredClients() ([]storage.Client, error) {
	var out []storage.Client
	err := s.scan(keyClient, func(k, v []byte) {
		var c storage.Client
		if err := json.Unmarshal(v, &c); err != nil {
			s.log.Warn("storage: unreadable client skipped", "key", string(k), "err", err)
			return
		}
		s.knownMu.Lock()
		s.known[c.ID] = struct{}{}
		s.knownMu.Unlock()
		out = append(out, c)
	})
	return out, err
}

func (s *store) StoredSubscriptions() ([]storage.Subscription, error) {
	var out []storage.Subscription
	err := s.scan(keySub, func(k, v []byte) {
		var sub storage.Subscription
		if err := json.Unmarshal(v, &sub); err != nil {
			s.log.Warn("storage: unreadable subscription skipped", "key", string(k), "err", err)
			return
		}
		out = append(out, sub)
	})
	return out, err
}

func (s *store) StoredRetainedMessages() ([]storage.Message, error) {
	var out []storage.Message
	err := s.scan(keyRetained, func(k, v []byte) {
		var m storage.Message
		if err := json.Unmarshal(v, &m); err != nil {
			s.log.Warn("storage: unreadable retained message skipped", "key", string(k), "err", err)
			return
		}
		out = append(out, m)
	})
	return out, err
}

// StoredInflightMessages returns every stored in-flight message, each
// client's in delivery order, and hands the sequences to inflightOrder so
// that a resumed session is resent in that order.
func (s *store) StoredInflightMessages() ([]storage.Message, error) {
	var all []storedInflight
	err := s.scan(keyInflight, func(k, v []byte) {
		var m storedInflight
		if err := json.Unmarshal(v, &m); err != nil {
			s.log.Warn("storage: unreadable in-flight message skipped", "key", string(k), "err", err)
			return
		}
		all = append(all, m)
	})
	slices.SortStableFunc(all, func(a, b storedInflight) int {
		if c := bytes.Compare([]byte(a.Msg.Client), []byte(b.Msg.Client)); c != 0 {
			return c
		}
		return cmpUint(a.Seq, b.Seq)
	})
	out := make([]storage.Message, len(all))
	for i, m := range all {
		s.order.restore(m.Msg.Client, m.Msg.PacketID, m.Seq)
		out[i] = m.Msg
	}
	return out, err
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// alive returns the time stored by touchAlive, or zero.
func (s *store) alive() time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db == nil {
		return time.Time{}
	}
	v, closer, err := s.db.Get([]byte(keyAlive))
	if err != nil {
		return time.Time{}
	}
	defer closer.Close()
	ms, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// touchAlive records that the reverse path has consumed up to about t (see
// reverseStartTime).
func (s *store) touchAlive(t time.Time) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.db != nil {
		_ = s.db.Set([]byte(keyAlive), strconv.AppendInt(nil, t.UnixMilli(), 10), s.wo)
	}
}

// pebbleLogger sends Pebble's log to slog.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) { l.log.Debug(fmt.Sprintf(format, args...)) }
func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...))
}
func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...))
	panic(fmt.Sprintf(format, args...))
}
