package state

import (
	"encoding/base64"
	"strconv"
	"unicode/utf8"
)

// scanHead reads a session record's head (sessionHead's members) from the
// JSON object b without encoding/json: every instance reads the head of
// every record the sessions table's change feed brings, two to three per
// session in a reconnect storm, and encoding/json (reflection, and a
// validating pass over the whole value first) was a twentieth of an
// instance's CPU there.
//
// It walks the object's members, reads the head's, and steps over the
// others' values (strings, numbers, literals, nested objects and arrays)
// without looking inside them. It reads what Session.Encode writes; ok is
// false, and the caller decodes b with encoding/json, for anything else it
// meets on its way: a member name that is not plain lower case, a string
// with an escape, a control character or invalid UTF-8, a head number that
// is not a plain integer of its type, a null, a malformed object.
// (FuzzScanHead: wherever it answers for valid JSON, encoding/json answers
// the same.)
func scanHead(b []byte, h *sessionHead) (ok bool) {
	s := headScanner{b: b}
	if !s.skipSpace() || s.b[s.i] != '{' {
		return false
	}
	s.i++
	if !s.skipSpace() {
		return false
	}
	if s.b[s.i] == '}' {
		s.i++
		return s.end()
	}
	for {
		name, ok := s.name()
		if !ok || !s.skipSpace() || s.b[s.i] != ':' {
			return false
		}
		s.i++
		if !s.skipSpace() {
			return false
		}
		switch key := string(name); key { // compared without a copy
		case "v":
			n, ok := s.integer(strconv.IntSize)
			if !ok {
				return false
			}
			h.Version = int(n)
		case "epoch", "disconnected":
			n, ok := s.integer(64)
			if !ok {
				return false
			}
			if key == "epoch" {
				h.Epoch = n
			} else {
				h.Disconnected = n
			}
		case "expiry":
			tok, ok := s.intToken()
			if !ok {
				return false
			}
			n, err := strconv.ParseUint(string(tok), 10, 32) // refuses "-0" as encoding/json does
			if err != nil {
				return false
			}
			h.Expiry = uint32(n)
		case "connected", "clean":
			v, ok := s.boolean()
			if !ok {
				return false
			}
			if key == "connected" {
				h.Connected = v
			} else {
				h.Clean = v
			}
		case "username":
			v, ok := s.plainString()
			if !ok {
				return false
			}
			u, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				return false
			}
			h.Username = u
		case "client", "owner", "will_by":
			v, ok := s.plainString()
			if !ok {
				return false
			}
			switch key {
			case "client":
				h.Client = v
			case "owner":
				h.Owner = v
			default:
				h.WillBy = v
			}
		default:
			if !s.skipValue() {
				return false
			}
		}
		if !s.skipSpace() {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			if !s.skipSpace() {
				return false
			}
		case '}':
			s.i++
			return s.end()
		default:
			return false
		}
	}
}

type headScanner struct {
	b []byte
	i int
}

// skipSpace steps over JSON whitespace; false at the end of b.
func (s *headScanner) skipSpace() bool {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return true
		}
	}
	return false
}

// end reports whether only whitespace follows.
func (s *headScanner) end() bool { return !s.skipSpace() }

// name reads a member name of lower-case letters and underscores (the
// names Encode writes; encoding/json would match others without regard to
// case).
func (s *headScanner) name() ([]byte, bool) {
	if s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		c := s.b[j]
		if c == '"' {
			s.i = j + 1
			return s.b[start:j], true
		}
		if (c < 'a' || c > 'z') && c != '_' {
			return nil, false
		}
	}
	return nil, false
}

// plainString reads a string without escapes or control characters, in
// valid UTF-8 (encoding/json would replace invalid bytes).
func (s *headScanner) plainString() (string, bool) {
	if s.b[s.i] != '"' {
		return "", false
	}
	start := s.i + 1
	ascii := true
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			v := s.b[start:j]
			if !ascii && !utf8.Valid(v) {
				return "", false
			}
			s.i = j + 1
			return string(v), true
		case c == '\\' || c < 0x20:
			return "", false
		case c >= 0x80:
			ascii = false
		}
	}
	return "", false
}

// integer reads a plain integer (an optional minus, digits) of bits bits.
func (s *headScanner) integer(bits int) (int64, bool) {
	tok, ok := s.intToken()
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(tok), 10, bits)
	return n, err == nil
}

// intToken steps over a scalar and returns it if it is a JSON integer.
func (s *headScanner) intToken() ([]byte, bool) {
	start := s.i
	if !s.skipScalar() || !plainInt(s.b[start:s.i]) {
		return nil, false
	}
	return s.b[start:s.i], true
}

// plainInt reports whether tok is a JSON integer: an optional minus, then
// 0 or digits not starting with 0 (strconv would also take "+1" and "01").
func plainInt(tok []byte) bool {
	if len(tok) > 0 && tok[0] == '-' {
		tok = tok[1:]
	}
	if len(tok) == 0 || len(tok) > 1 && tok[0] == '0' {
		return false
	}
	for _, c := range tok {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// boolean reads true or false.
func (s *headScanner) boolean() (bool, bool) {
	start := s.i
	if !s.skipScalar() {
		return false, false
	}
	switch string(s.b[start:s.i]) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// skipScalar steps over a number or literal: up to the next delimiter.
func (s *headScanner) skipScalar() bool {
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return s.i > start
		case '"', '{', '[', ':':
			return false
		}
		s.i++
	}
	return false
}

// skipValue steps over any value, not looking inside strings, objects and
// arrays beyond finding their end.
func (s *headScanner) skipValue() bool {
	switch s.b[s.i] {
	case '"':
		return s.skipString()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if !s.skipString() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	default:
		return s.skipScalar()
	}
}

// skipString steps over a string, escapes included.
func (s *headScanner) skipString() bool {
	for j := s.i + 1; j < len(s.b); j++ {
		switch s.b[j] {
		case '\\':
			j++
		case '"':
			s.i = j + 1
			return true
		}
	}
	return false
}
