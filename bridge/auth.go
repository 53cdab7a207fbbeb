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

// addAuth installs authentication and topic ACLs. With no users and no
// mqtt.anonymous ACL every client is accepted and may do everything
// (Validate only allows that on loopback listeners or with
// allow_anonymous). With users, a client is checked against its
// username/password (plain or bcrypt) and gets that user's ACL; a client
// without a username is admitted only with allow_anonymous (always, when no
// users are configured) and gets the mqtt.anonymous ACL.
//
// It returns the ACL's two checks, the ones mochi makes itself
// (OnACLCheck), for what Ferry does outside mochi: read for a resumed
// session's replay from Kafka, publish for the Will of a dead instance's
// client; nil: everyone may do everything.
func addAuth(s *mqtt.Server, cfg MQTTConfig) (read, write aclCheck, err error) {
	if len(cfg.Users) == 0 && cfg.Anonymous.empty() {
		if err := s.AddHook(new(auth.AllowHook), nil); err != nil {
			return nil, nil, fmt.Errorf("mqtt auth: %w", err)
		}
		return nil, nil, nil
	}
	h := &authHook{
		anonymous: cfg.AllowAnonymous || len(cfg.Users) == 0,
		anonACL:   cfg.Anonymous,
		users:     make(map[string]User, len(cfg.Users)),
	}
	for _, u := range cfg.Users {
		h.users[u.Username] = u
	}
	if err := s.AddHook(h, nil); err != nil {
		return nil, nil, fmt.Errorf("mqtt auth: %w", err)
	}
	return h.mayRead, h.mayWrite, nil
}

// aclCheck is one of the ACL's two checks, as mochi makes them
// (OnACLCheck). Read: whether cl's user may subscribe to topic (a topic
// filter) or receive a message published to topic (a topic name): for
// every filter of a SUBSCRIBE and every delivery. Write: whether it may
// publish to topic: for every PUBLISH and Will.
type aclCheck func(cl *mqtt.Client, topic string) bool

type authHook struct {
	mqtt.HookBase
	anonymous bool
	anonACL   ACL
	users     map[string]User
}

func (h *authHook) ID() string { return "ferry-auth" }

func (h *authHook) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
}

func (h *authHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	if len(h.users) == 0 {
		// No credentials to check: every client is anonymous, whatever
		// username it sends, and gets the anonymous ACL.
		return true
	}
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

// OnACLCheck is called with a topic name for a PUBLISH (write) and for a
// delivery to a subscriber, and with a topic filter for a SUBSCRIBE.
func (h *authHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	acl := h.anonACL
	if u, ok := h.users[string(cl.Properties.Username)]; ok {
		acl = u.ACL
	} else if len(h.users) > 0 && !(h.anonymous && len(bytes.TrimSpace(cl.Properties.Username)) == 0) {
		return false
	}
	return acl.allows(topic, write)
}

// mayRead is the hook's read check.
func (h *authHook) mayRead(cl *mqtt.Client, topic string) bool { return h.OnACLCheck(cl, topic, false) }

// mayWrite is the hook's publish check.
func (h *authHook) mayWrite(cl *mqtt.Client, topic string) bool { return h.OnACLCheck(cl, topic, true) }

// allows reports whether the ACL permits publishing to topic (write) or
// subscribing to / receiving from topic. A shared subscription is checked by
// its filter ($share/group/filter -> filter). A deny filter refuses what it
// covers: a subscription it covers entirely is refused; a wider one is
// granted, and mochi's per-delivery check then withholds the messages on the
// denied topics. An allow list, when not empty, must cover the topic or the
// whole subscription.
func (a ACL) allows(topic string, write bool) bool {
	if !write && strings.HasPrefix(topic, "$share/") {
		if parts := strings.SplitN(topic, "/", 3); len(parts) == 3 {
			topic = parts[2]
		}
	}
	allow, deny := a.Subscribe, a.DenySubscribe
	if write {
		allow, deny = a.Publish, a.DenyPublish
	}
	for _, f := range deny {
		if filterMatches(f, topic) {
			return false
		}
	}
	if len(allow) == 0 {
		return true
	}
	for _, f := range allow {
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
