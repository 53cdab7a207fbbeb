package bridge

import (
	"bytes"
	"crypto/subtle"
	"fmt"
	"strings"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/packets"
	"golang.org/x/crypto/bcrypt"
)

// addAuth installs authentication: with no users configured every client is
// accepted (Validate only allows that on loopback listeners or with
// allow_anonymous); otherwise username/password (plain or bcrypt) and
// per-user topic ACLs.
func addAuth(s *mqtt.Server, cfg MQTTConfig) error {
	if len(cfg.Users) == 0 {
		if err := s.AddHook(new(auth.AllowHook), nil); err != nil {
			return fmt.Errorf("mqtt auth: %w", err)
		}
		return nil
	}
	h := &authHook{anonymous: cfg.AllowAnonymous, users: make(map[string]User, len(cfg.Users))}
	for _, u := range cfg.Users {
		h.users[u.Username] = u
	}
	if err := s.AddHook(h, nil); err != nil {
		return fmt.Errorf("mqtt auth: %w", err)
	}
	return nil
}

type authHook struct {
	mqtt.HookBase
	anonymous bool
	users     map[string]User
}

func (h *authHook) ID() string { return "ferry-auth" }

func (h *authHook) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
}

func (h *authHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	name := string(pk.Connect.Username)
	if name == "" && len(pk.Connect.Password) == 0 {
		return h.anonymous
	}
	u, ok := h.users[name]
	if !ok {
		return false
	}
	return passwordOK(u.Password, pk.Connect.Password)
}

func passwordOK(stored string, given []byte) bool {
	if strings.HasPrefix(stored, "$2a$") || strings.HasPrefix(stored, "$2b$") || strings.HasPrefix(stored, "$2y$") {
		return bcrypt.CompareHashAndPassword([]byte(stored), given) == nil
	}
	return subtle.ConstantTimeCompare([]byte(stored), given) == 1
}

func (h *authHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	u, ok := h.users[string(cl.Properties.Username)]
	if !ok {
		return h.anonymous && len(bytes.TrimSpace(cl.Properties.Username)) == 0
	}
	filters := u.Subscribe
	if write {
		filters = u.Publish
	}
	if len(filters) == 0 {
		return true
	}
	for _, f := range filters {
		if filterMatches(f, topic) {
			return true
		}
	}
	return false
}

// filterMatches reports whether every topic that topic (a topic name, or a
// subscription filter) can stand for falls under the ACL filter. So "a/+"
// permits "a/b" and the subscription "a/+", but not the subscription "a/#"
// (which also covers "a/b/c"); and, as in MQTT matching, a filter starting
// with a wildcard does not cover topics starting with '$'.
func filterMatches(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	fl := strings.Split(filter, "/")
	tl := strings.Split(topic, "/")
	for i, f := range fl {
		if f == "#" {
			return true
		}
		if i >= len(tl) {
			return false
		}
		switch {
		case f == "+":
			if tl[i] == "#" {
				return false
			}
		case f != tl[i]:
			return false
		}
	}
	return len(fl) == len(tl)
}
