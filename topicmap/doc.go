// Package topicmap routes topics between MQTT and Kafka: it decides, for each MQTT topic,
// the Kafka topic, record key and extra headers, and for each Kafka topic the MQTT topic,
// QoS and retain flag. It is pure code (no I/O) and safe for concurrent use.
//
// # Default rule
//
// Compatible with the reference bridge: MQTT "/tacos/pub/lf" <-> Kafka "_tacos_pub_lf".
// EncodeTopic maps each byte of the MQTT topic:
//
//	A-Z a-z 0-9   literal
//	/             _
//	-             --
//	any other     '-' + two lowercase hex digits ("_" -> "-5f", "." -> "-2e",
//	              " " -> "-20", "é" (UTF-8 c3 a9) -> "-c3-a9", "$" -> "-24")
//
// The code is prefix-free, so it is injective and DecodeTopic inverts it exactly
// ("a/b" -> "a_b", "a_b" -> "a-5fb": they never share a Kafka topic). Encoded names never
// contain '.', so no two of them collide in Kafka's metric names (where '.' and '_' are the
// same, and Kafka refuses to create the second topic); that is why the escape character is
// '-' and not '.'. Only canonical names decode: DecodeTopic rejects '.', uppercase hex and
// escapes of bytes that have a shorter form, making the rule a bijection between the MQTT
// topics it accepts and the Kafka names it produces.
//
// A topic the default rule cannot map is rejected with a *TopicError naming the topic and
// the reason, never renamed: empty topics, wildcards in a topic name, U+0000, invalid UTF-8,
// encoded names longer than 249 characters, and topics starting with "//" (which would give
// the "__" prefix Kafka reserves for its internal topics). A default-rule name equal (or
// equal in metric name) to a forward rule's fixed Kafka topic is also rejected, so an
// unrelated MQTT topic never silently joins a rule's topic.
//
// # Rules
//
// Config has three lists. Forward rules map an MQTT filter ('+', '#') to a Kafka topic
// template, a key template and extra headers (templated values). Exclude filters are never
// bridged in either direction ("$SYS/#" by default). Reverse rules map a Kafka topic
// (exact name, or /regex/ matched against the whole name) to an MQTT topic template, QoS
// and retain; the record header "mqtt.topic" (HeaderMQTTTopic), when present and a valid
// topic name, wins over the template. New validates everything and reports the first bad
// rule as a *RuleError with the rule's index, the offending text and the reason.
//
// # Templates
//
//	{1}..{n}   forward: MQTT topic level n (1-based; "/a" has levels "" and "a")
//	           reverse: capture group n of the /regex/
//	{topic}    forward: the whole MQTT topic; reverse: the whole Kafka topic
//	{default}  forward: EncodeTopic(topic); reverse: DecodeTopic(kafka topic)
//	{{ }}      literal braces
//
// Example: filter "sensors/+/temperature", topic "sensor-temps", key "{2}" sends
// "sensors/dev7/temperature" to "sensor-temps" keyed "dev7". An empty Topic means the
// default rule, an empty Key means the MQTT topic. Substituted text is not escaped: a
// topic template whose result is not a valid Kafka name (or is Kafka-internal) gives a
// *TopicError for that message; use {default} for escaped text. Level placeholders beyond
// a filter's level count are rejected by New unless the filter ends in '#'.
//
// # Precedence
//
// Forward, for an MQTT topic:
//
//  1. an exclude filter matches: ErrExcluded;
//  2. a forward rule whose filter has no wildcard equals the topic (hash map, O(1));
//  3. the most specific matching wildcard rule (trie, O(levels)): filters are compared
//     level by level, a literal level beats '+', '+' beats the filter ending, and the
//     filter ending beats '#' (so "a/+" beats "a/+/#" for "a/b", and "a/b/#" beats "a/#");
//     two different filters matching the same topic always differ somewhere, and duplicate
//     filters are rejected by New, so there are no ties;
//  4. the default rule.
//
// MQTT semantics apply: '+' matches one level, possibly empty; "a/#" also matches "a";
// filters starting with a wildcard do not match topics starting with '$'.
//
// Reverse, for a Kafka topic: an exact reverse rule (hash map), else the first matching
// regex rule in order, else the default (DecodeTopic, DefaultReverseQoS, no retain). The resulting MQTT
// topic is then checked against the exclude filters.
//
// # Cost
//
// Match walks the topic's levels once through a map of exact filters and a trie of
// wildcard filters, without splitting the topic or allocating; it backtracks only where
// a literal and a '+' branch both match a prefix, so its cost depends on the topic and the
// shape of the trie, not on the number of rules. Forward returns a pre-built Route without
// allocating for rules with a fixed topic, key and headers.
//
// # Headers
//
// The standard header names are the Header* constants; names starting with "mqtt." or
// "ferry." are reserved, and so, for a Map, are the header names its forward rules set
// (Map.IsReservedHeader). UserPropsToHeaders (Map.UserPropsToHeaders for a publish the Map
// routes) and HeadersToUserProps convert MQTT v5 user properties to Kafka headers and back,
// dropping reserved names (so a client cannot spoof "ferry.origin" or a rule's header).
// Standard carries the standard headers' values.
package topicmap
