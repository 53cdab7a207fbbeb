package bridge

import (
	"fmt"
	"os"
)

// addSessionHooks adds the hooks that keep MQTT sessions: inflightOrder
// (redelivery order, always) and, with storage.dir, the durable store. Both
// must be added before Serve, which loads the stored sessions.
func (b *Bridge) addSessionHooks() error {
	b.order = newInflightOrder(b.server)
	if err := b.server.AddHook(b.order, nil); err != nil {
		return fmt.Errorf("inflight order hook: %w", err)
	}
	dir := b.cfg.Storage.Dir
	if dir == "" {
		b.log.Warn("no storage.dir: MQTT sessions, queued QoS 1/2 messages and retained messages are kept in memory only; a restart loses them")
		return nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("storage.dir=%s: %w", dir, err)
	}
	st, err := openStore(dir, storeModeGroup, b.log, b.order)
	if err != nil {
		return err
	}
	if err := b.server.AddHook(st, nil); err != nil {
		_ = st.Stop()
		return fmt.Errorf("session store hook: %w", err)
	}
	b.store = st
	b.log.Info("session store open", "storage.dir", dir)
	return nil
}
