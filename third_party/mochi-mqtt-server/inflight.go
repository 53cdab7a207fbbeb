// SPDX-License-Identifier: MIT
// SPDX-FileCopyrightText: 2023 mochi-mqtt, mochi-co
// SPDX-FileContributor: mochi-co

package mqtt

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Inflight is a map of InflightMessage keyed on packet id.
type Inflight struct {
	sync.RWMutex
	internal            map[uint16]*packets.Packet // internal contains the inflight packets (Ferry: from inflightPackets, never handed out)
	receiveQuota        int32                      // remaining inbound qos quota for flow control
	sendQuota           int32                      // remaining outbound qos quota for flow control
	maximumReceiveQuota int32                      // maximum allowed receive quota
	maximumSendQuota    int32                      // maximum allowed send quota
}

// inflightPackets holds the packets of every Inflight (Ferry: a map's
// value over 128 bytes is allocated on its own, so each QoS 1/2 delivery
// allocated an 800-byte packet that its acknowledgement made garbage: a
// sixth of an instance's allocated bytes in a reconnect storm). A packet
// goes back once deleted (Delete); the map's packets are only copied out.
var inflightPackets = sync.Pool{New: func() any { return new(packets.Packet) }}

// pooledCopy is a packet of inflightPackets holding a copy of m.
func pooledCopy(m *packets.Packet) *packets.Packet {
	p := inflightPackets.Get().(*packets.Packet)
	*p = *m
	return p
}

// NewInflights returns a new instance of an Inflight packets map.
func NewInflights() *Inflight {
	return &Inflight{
		internal: map[uint16]*packets.Packet{},
	}
}

// Set adds or updates an inflight packet by packet id.
func (i *Inflight) Set(m packets.Packet) bool {
	i.Lock()
	defer i.Unlock()

	if p, ok := i.internal[m.PacketID]; ok {
		*p = m
		return false
	}
	i.internal[m.PacketID] = pooledCopy(&m)
	return true
}

// Get returns an inflight packet by packet id.
func (i *Inflight) Get(id uint16) (packets.Packet, bool) {
	i.RLock()
	defer i.RUnlock()

	if m, ok := i.internal[id]; ok {
		return *m, true
	}

	return packets.Packet{}, false
}

// typeOf returns the fixed header type of the inflight packet with the id
// (Ferry: Get copies the 800-byte packet, or zeroes one when there is none,
// for every inbound QoS 1/2 publish).
func (i *Inflight) typeOf(id uint16) (byte, bool) {
	i.RLock()
	defer i.RUnlock()
	p, ok := i.internal[id]
	if !ok {
		return 0, false
	}
	return p.FixedHeader.Type, true
}

// Len returns the size of the inflight messages map.
func (i *Inflight) Len() int {
	i.RLock()
	defer i.RUnlock()
	return len(i.internal)
}

// Clone returns a new instance of Inflight with the same message data.
// This is used when transferring inflights from a taken-over session.
func (i *Inflight) Clone() *Inflight {
	c := NewInflights()
	i.RLock()
	defer i.RUnlock()
	for k, v := range i.internal {
		c.internal[k] = pooledCopy(v)
	}
	return c
}

// GetAll returns all the inflight messages.
func (i *Inflight) GetAll(immediate bool) []packets.Packet {
	i.RLock()
	defer i.RUnlock()

	m := []packets.Packet{}
	for _, v := range i.internal {
		if !immediate || (immediate && v.Expiry < 0) {
			m = append(m, *v)
		}
	}

	sort.Slice(m, func(i, j int) bool {
		return uint16(m[i].Created) < uint16(m[j].Created)
	})

	return m
}

// expired returns the inflight packets Client.ClearExpiredInflights drops,
// in GetAll's order (Ferry: it looked at a sorted copy of every inflight
// packet of every client, every second, to find the few that expired).
func (i *Inflight) expired(now int64) []packets.Packet {
	i.RLock()
	var m []packets.Packet
	for _, tk := range i.internal {
		// Ferry: only an expiry the publisher asked (capped when received,
		// Server.SetMessageExpiry); upstream also dropped every delivery
		// older than the maximum message expiry, asked or not (a day by
		// default).
		if tk.ProtocolVersion == 5 && tk.Expiry > 0 && tk.Expiry < now { // [MQTT-3.3.2-5]
			m = append(m, *tk)
		}
	}
	i.RUnlock()
	sort.Slice(m, func(i, j int) bool {
		return uint16(m[i].Created) < uint16(m[j].Created)
	})
	return m
}

// NextImmediate returns the next inflight packet which is indicated to be sent immediately.
// This typically occurs when the quota has been exhausted, and we need to wait until new quota
// is free to continue sending.
func (i *Inflight) NextImmediate() (packets.Packet, bool) {
	i.RLock()
	defer i.RUnlock()

	m := i.GetAll(true)
	if len(m) > 0 {
		return m[0], true
	}

	return packets.Packet{}, false
}

// Delete removes an in-flight message from the map. Returns true if the message existed.
func (i *Inflight) Delete(id uint16) bool {
	i.Lock()
	defer i.Unlock()

	p, ok := i.internal[id]
	if ok {
		delete(i.internal, id)
		*p = packets.Packet{} // keeps no payload alive
		inflightPackets.Put(p)
	}

	return ok
}

// TakeRecieveQuota reduces the receive quota by 1.
func (i *Inflight) DecreaseReceiveQuota() {
	if atomic.LoadInt32(&i.receiveQuota) > 0 {
		atomic.AddInt32(&i.receiveQuota, -1)
	}
}

// TakeRecieveQuota increases the receive quota by 1.
func (i *Inflight) IncreaseReceiveQuota() {
	if atomic.LoadInt32(&i.receiveQuota) < atomic.LoadInt32(&i.maximumReceiveQuota) {
		atomic.AddInt32(&i.receiveQuota, 1)
	}
}

// ResetReceiveQuota resets the receive quota to the maximum allowed value.
func (i *Inflight) ResetReceiveQuota(n int32) {
	atomic.StoreInt32(&i.receiveQuota, n)
	atomic.StoreInt32(&i.maximumReceiveQuota, n)
}

// DecreaseSendQuota reduces the send quota by 1.
func (i *Inflight) DecreaseSendQuota() {
	if atomic.LoadInt32(&i.sendQuota) > 0 {
		atomic.AddInt32(&i.sendQuota, -1)
	}
}

// IncreaseSendQuota increases the send quota by 1.
func (i *Inflight) IncreaseSendQuota() {
	if atomic.LoadInt32(&i.sendQuota) < atomic.LoadInt32(&i.maximumSendQuota) {
		atomic.AddInt32(&i.sendQuota, 1)
	}
}

// ResetSendQuota resets the send quota to the maximum allowed value.
func (i *Inflight) ResetSendQuota(n int32) {
	atomic.StoreInt32(&i.sendQuota, n)
	atomic.StoreInt32(&i.maximumSendQuota, n)
}
