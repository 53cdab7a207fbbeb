package bridge

import (
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// compatHook corrects, in Ferry's layer, what mochi v2.7.9 sends that the
// MQTT specification does not allow and that can be fixed on the way out.
//
// CONNACK to MQTT 3.1.1 clients: 3.1.1 return codes are 0x00-0x05 only
// (3.2.2.3), but mochi maps just a few of its v5 reason codes to them
// (packets.V5CodesToV3) and sends the others as they are. In particular a
// zero-length ClientId with CleanSession 0 is refused with 0x80
// (server.go validateConnect), which Eclipse Paho 3.1.1 reads as accepted;
// the spec requires 0x02 Identifier rejected [MQTT-3.1.3-8]. Any other code
// a 3.1.1 client cannot know becomes 0x03 Server unavailable.
//
// With mqtt.obscure_not_authorized, an MQTT 5 PUBACK/PUBREC refusing a
// publish the ACL denies says 0x80 instead of 0x87, like the SUBACK that
// mochi's Compatibilities.ObscureNotAuthorized covers (mochi writes the
// publish refusal with 0x87 regardless).
type compatHook struct {
	mqtt.HookBase
	obscureNotAuthorized bool
}

func (h *compatHook) ID() string { return "ferry-compat" }

func (h *compatHook) Provides(b byte) bool { return b == mqtt.OnPacketEncode }

func (h *compatHook) OnPacketEncode(cl *mqtt.Client, pk packets.Packet) packets.Packet {
	if h.obscureNotAuthorized && pk.ProtocolVersion >= 5 && pk.ReasonCode == packets.ErrNotAuthorized.Code &&
		(pk.FixedHeader.Type == packets.Puback || pk.FixedHeader.Type == packets.Pubrec) {
		pk.ReasonCode = packets.ErrUnspecifiedError.Code
		if pk.Properties.ReasonString == packets.ErrNotAuthorized.Reason {
			pk.Properties.ReasonString = packets.ErrUnspecifiedError.Reason
		}
		return pk
	}
	if pk.FixedHeader.Type != packets.Connack || pk.ProtocolVersion >= 5 || pk.ReasonCode <= packets.Err3NotAuthorized.Code {
		return pk
	}
	// ParseConnect assigned an id: the client sent a zero-length one.
	if cl.Properties.Props.AssignedClientID != "" && !cl.Properties.Clean {
		pk.ReasonCode = packets.Err3ClientIdentifierNotValid.Code
	} else {
		pk.ReasonCode = packets.Err3ServerUnavailable.Code
	}
	return pk
}
