package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferry-bridge/ferry/probe/stamp"
	"github.com/ferry-bridge/ferry/probe/stats"
)

// rawPublisher is one publishing connection of the raw MQTT engine. It keeps
// one pre-encoded PUBLISH per topic, patches the packet id and the stamp in
// place, and copies it into a 64 KiB write buffer that is written out only
// when the window of publishes in flight is used up, when the generator is
// about to wait (open loop), or when the buffer is full. A reading goroutine
// times each acknowledgement as it arrives (PUBACK; at QoS 2 PUBREC, answered
// with PUBREL, then PUBCOMP) and hands the freed window back in bulk, once
// per read of the socket, so that the sender wakes once per batch of acks
// rather than once per ack.
type rawPublisher struct {
	c       *rawConn
	clk     clock
	qos     byte
	ackType byte // the packet that completes a publish: PUBACK or PUBCOMP
	timeout time.Duration
	window  int64
	tpls    []publishTemplate
	topicOf func(seq uint32) int
	// onAck, if set, receives each acknowledged stamp (--ack-only runs);
	// at QoS 0 it is called when the publish is buffered.
	onAck func(st stamp.Stamp, nowNs int64)

	// Packet ids cycle through 1..len(slots)-1 (at least twice the window);
	// slots[pid] holds the publish in flight under pid, busy until acked.
	slots   []pidSlot
	nextPid int
	credits int64        // sender-owned: publishes it may still send
	freed   atomic.Int64 // credits the reader handed back
	wake    chan struct{}
	sent    atomic.Int64 // QoS > 0 publishes written
	acked   atomic.Int64
	dead    chan struct{} // closed when the reader ends
	rerr    error         // why the reader ended; set before dead closes
	acks    *stats.Latency
	wg      sync.WaitGroup

	// QoS 0 with onAck (--ack-only): every pingBatch publishes are followed
	// by a PINGREQ; a broker handles a connection's packets in order, so its
	// PINGRESP acknowledges the batch before it. cur is the sender's batch,
	// batches those awaiting their PINGRESP.
	cur      []pending0
	pingMu   sync.Mutex
	batches  [][]pending0
	pingsOut atomic.Int64
}

type pending0 struct {
	st    stamp.Stamp
	nowNs int64
}

// pingBatch is the number of QoS 0 publishes one PINGREQ acknowledges.
const pingBatch = 256

var pingreq = []byte{12 << 4, 0}

type pidSlot struct {
	busy   atomic.Bool
	sentNs atomic.Int64 // actual write time, for the ack latency
	seq    atomic.Uint32
	due    atomic.Int64 // stamp time (intended send time in open loop)
}

// newRawPublisher starts the reader of c. window is the number of QoS 1/2
// publishes in flight; topics are the MQTT topics, topicOf picks one per
// sequence.
func newRawPublisher(c *rawConn, clk clock, qos byte, window int, timeout time.Duration, template []byte,
	topics []string, topicOf func(uint32) int) *rawPublisher {
	p := &rawPublisher{
		c: c, clk: clk, qos: qos, timeout: timeout, window: int64(window), topicOf: topicOf,
		credits: int64(window), wake: make(chan struct{}, 1), dead: make(chan struct{}),
		acks: stats.NewLatency(),
	}
	p.ackType = pktPuback
	if qos == 2 {
		p.ackType = pktPubcomp
	}
	for _, t := range topics {
		p.tpls = append(p.tpls, newPublishTemplate(t, qos, template))
	}
	if qos > 0 {
		p.slots = make([]pidSlot, min(65535, max(2*window, 16))+1)
	}
	p.wg.Add(1)
	go p.read()
	return p
}

func (p *rawPublisher) sendErr(what string, err error) error {
	return fmt.Errorf("%w: publish on %s as %s: %s: %w", ErrSend, p.c.url, p.c.id, what, err)
}

// sendStamp publishes one message stamped st; nowNs is its actual send
// time. It waits only when the window is used up.
func (p *rawPublisher) sendStamp(ctx context.Context, st stamp.Stamp, nowNs int64) error {
	t := &p.tpls[p.topicOf(st.Seq)]
	stamp.Put(t.pkt[t.stampOff:], st)
	if p.qos == 0 {
		p.c.wmu.Lock()
		_, err := p.c.bw.Write(t.pkt)
		p.c.wmu.Unlock()
		if err != nil {
			return p.sendErr("write", err)
		}
		if p.onAck != nil {
			p.cur = append(p.cur, pending0{st, nowNs})
			if len(p.cur) == pingBatch {
				return p.ping()
			}
		}
		return nil
	}
	pid, err := p.takePid(ctx)
	if err != nil {
		return err
	}
	s := &p.slots[pid]
	s.seq.Store(st.Seq)
	s.due.Store(st.SentNs)
	s.sentNs.Store(nowNs)
	t.pkt[t.pidOff], t.pkt[t.pidOff+1] = byte(pid>>8), byte(pid)
	p.c.wmu.Lock()
	_, err = p.c.bw.Write(t.pkt)
	p.c.wmu.Unlock()
	if err != nil {
		return p.sendErr("write", err)
	}
	p.sent.Add(1)
	return nil
}

// takePid takes one credit of the window and the next free packet id,
// flushing and waiting when there is none.
func (p *rawPublisher) takePid(ctx context.Context) (uint16, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if p.credits == 0 {
			p.credits = p.freed.Swap(0)
		}
		if p.credits > 0 {
			pid := p.nextPid + 1
			if s := &p.slots[pid]; !s.busy.Load() {
				s.busy.Store(true)
				p.nextPid = pid % (len(p.slots) - 1)
				p.credits--
				return uint16(pid), nil
			}
			// The broker acknowledged later publishes before this one:
			// wait for it like for a credit.
		}
		if err := p.c.flush(); err != nil {
			return 0, p.sendErr("write", err)
		}
		if timer == nil {
			timer = time.NewTimer(p.timeout)
		}
		select {
		case <-p.wake:
		case <-p.dead:
			return 0, p.sendErr(fmt.Sprintf("connection ended with %d publishes unacknowledged", p.sent.Load()-p.acked.Load()), p.rerr)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-timer.C:
			return 0, p.sendErr("window full", fmt.Errorf("no acknowledgement for %v (%d in flight): %w",
				p.timeout, p.sent.Load()-p.acked.Load(), errTimeout))
		}
	}
}

// ping closes the current QoS 0 batch with a PINGREQ.
func (p *rawPublisher) ping() error {
	p.pingMu.Lock()
	p.batches = append(p.batches, p.cur)
	p.pingMu.Unlock()
	p.cur = make([]pending0, 0, pingBatch)
	p.pingsOut.Add(1)
	p.c.wmu.Lock()
	_, err := p.c.bw.Write(pingreq)
	p.c.wmu.Unlock()
	if err != nil {
		return p.sendErr("write", err)
	}
	return nil
}

// idle writes out buffered publishes: the generator is about to wait.
func (p *rawPublisher) idle() error {
	if err := p.c.flush(); err != nil {
		return p.sendErr("write", err)
	}
	return nil
}

func (p *rawPublisher) send(ctx context.Context, seq uint32, payload []byte) error {
	st, err := stamp.Parse(payload)
	if err != nil {
		return err
	}
	return p.sendStamp(ctx, st, p.clk.now())
}

// flush writes out the buffer and waits until every publish is
// acknowledged (at most Timeout after the last acknowledgement).
func (p *rawPublisher) flush(ctx context.Context) error {
	if err := p.c.flush(); err != nil {
		return p.sendErr("write", err)
	}
	if p.qos == 0 && p.onAck == nil {
		return nil
	}
	if p.qos == 0 && len(p.cur) > 0 {
		if err := p.ping(); err != nil {
			return err
		}
	}
	if err := p.c.flush(); err != nil {
		return p.sendErr("write", err)
	}
	outstanding := func() int64 {
		if p.qos == 0 {
			return p.pingsOut.Load()
		}
		return p.sent.Load() - p.acked.Load()
	}
	timer := time.NewTimer(p.timeout)
	defer timer.Stop()
	for last := p.acked.Load(); outstanding() > 0; {
		select {
		case <-p.wake:
			if a := p.acked.Load(); a != last {
				last = a
				timer.Reset(p.timeout)
			}
		case <-p.dead:
			if outstanding() > 0 {
				return p.sendErr(fmt.Sprintf("connection ended with %d publishes (QoS 0: PINGREQs) unacknowledged", outstanding()), p.rerr)
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return p.sendErr("flush", fmt.Errorf("%d publishes (QoS 0: PINGREQs) unacknowledged after %v: %w",
				outstanding(), p.timeout, errTimeout))
		}
	}
	return nil
}

// close disconnects and waits for the reader.
func (p *rawPublisher) close() {
	p.c.close()
	p.wg.Wait()
}

// read handles the broker's packets until the connection ends.
func (p *rawPublisher) read() {
	defer p.wg.Done()
	var pending int64
	var relNeeded bool
	handBack := func() {
		if relNeeded {
			if err := p.c.flush(); err != nil && p.rerr == nil {
				p.rerr = err
			}
			relNeeded = false
		}
		if pending > 0 {
			p.freed.Add(pending)
			p.acked.Add(pending)
			pending = 0
			select {
			case p.wake <- struct{}{}:
			default:
			}
		}
	}
	err := func() error {
		for {
			if p.c.rd.br.Buffered() == 0 {
				handBack() // the next read may block: give back what we have
			}
			pk, err := p.c.rd.next()
			if err != nil {
				return err
			}
			switch pk.typ {
			case pktPuback, pktPubcomp:
				if pk.typ != p.ackType {
					return fmt.Errorf("%w: packet type %d on a QoS %d publisher", errProtocol, pk.typ, p.qos)
				}
				pid, err := pk.pid()
				if err != nil {
					return err
				}
				if err := p.ack(pid); err != nil {
					return err
				}
				pending++
				if pending >= max(p.window/4, 1) {
					handBack()
				}
			case pktPubrec:
				pid, err := pk.pid()
				if err != nil {
					return err
				}
				if int(pid) >= len(p.slots) || !p.slots[pid].busy.Load() {
					return fmt.Errorf("%w: PUBREC for packet id %d not in flight", errProtocol, pid)
				}
				rel := ackPacket(pktPubrel, pid)
				p.c.wmu.Lock()
				_, err = p.c.bw.Write(rel[:])
				p.c.wmu.Unlock()
				if err != nil {
					return err
				}
				relNeeded = true
			case pktPingresp:
				p.pingMu.Lock()
				var b []pending0
				if len(p.batches) > 0 {
					b = p.batches[0]
					p.batches = p.batches[1:]
				}
				p.pingMu.Unlock()
				now := p.clk.now()
				for _, m := range b {
					p.acks.Record(now - m.nowNs)
					p.onAck(m.st, now)
				}
				if b != nil {
					p.acked.Add(int64(len(b)))
					p.pingsOut.Add(-1)
					select {
					case p.wake <- struct{}{}:
					default:
					}
				}
			case pktDisconn:
				return fmt.Errorf("broker sent DISCONNECT")
			default:
				return fmt.Errorf("%w: unexpected packet type %d", errProtocol, pk.typ)
			}
		}
	}()
	handBack()
	if p.c.closing.Load() && (errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF)) {
		err = nil
	}
	if err == nil {
		err = fmt.Errorf("connection closed")
	}
	if p.rerr == nil {
		p.rerr = err
	}
	close(p.dead)
}

// ack completes the publish under pid.
func (p *rawPublisher) ack(pid uint16) error {
	if int(pid) >= len(p.slots) || !p.slots[pid].busy.Load() {
		return fmt.Errorf("%w: acknowledgement for packet id %d not in flight", errProtocol, pid)
	}
	s := &p.slots[pid]
	now := p.clk.now()
	p.acks.Record(now - s.sentNs.Load())
	if p.onAck != nil {
		p.onAck(stamp.Stamp{Seq: s.seq.Load(), SentNs: s.due.Load()}, now)
	}
	s.busy.Store(false)
	return nil
}
