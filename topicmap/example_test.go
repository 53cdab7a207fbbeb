package topicmap_test

import (
	"errors"
	"fmt"

	"github.com/ferry-bridge/ferry/topicmap"
)

func Example() {
	cfg := topicmap.DefaultConfig() // excludes $SYS/#
	cfg.Forward = []topicmap.ForwardRule{
		// A device fleet into one topic, keyed by device (level 2).
		{Filter: "sensors/+/temperature", Topic: "sensor-temps", Key: "{2}"},
		// Everything under factory/ by the default rule (the same as no rule).
		{Filter: "factory/#"},
	}
	cfg.Reverse = []topicmap.ReverseRule{{Kafka: "commands", MQTT: "devices/commands", QoS: topicmap.QoS(1)}}
	m, err := topicmap.New(cfg)
	if err != nil {
		panic(err)
	}

	r, _ := m.Forward("sensors/dev7/temperature")
	fmt.Println(r.Topic, string(r.Key), r.Rule)

	r, _ = m.Forward("/tacos/pub/lf") // no rule: default
	fmt.Println(r.Topic, r.Rule)

	a, _ := topicmap.EncodeTopic("a/b")
	b, _ := topicmap.EncodeTopic("a_b") // '_' is escaped: no collision with a/b
	fmt.Println(a, b)

	_, err = m.Forward("$SYS/broker/uptime")
	fmt.Println(errors.Is(err, topicmap.ErrExcluded))

	_, err = m.Forward("factory/" + string([]byte{0xff}))
	fmt.Println(err)

	d, _ := m.Reverse("_tacos_sub_le", nil)
	fmt.Println(d.Topic)
	d, _ = m.Reverse("commands", nil)
	fmt.Println(d.Topic, d.QoS)
	d, _ = m.Reverse("commands", []topicmap.Header{{Key: topicmap.HeaderMQTTTopic, Value: []byte("devices/dev7/cmd")}})
	fmt.Println(d.Topic, d.QoS)
	// Output:
	// sensor-temps dev7 0
	// _tacos_pub_lf -1
	// a_b a-5fb
	// true
	// topicmap: topic "factory/\xff": MQTT topic is not valid UTF-8
	// /tacos/sub/le
	// devices/commands 1
	// devices/dev7/cmd 1
}
