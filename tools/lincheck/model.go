// The sequential specification of the key-value store that histories are checked against, as a
// Porcupine model of ONE key (the checker partitions a history by key: a history is linearizable
// iff each key's sub-history is, because operations on different keys commute).
//
// State: the key is absent, or present with a byte string (compared as the JSON strings the
// producer wrote). Operations and the outputs they may give in a state:
//
//	get(key)                    -> found=false if absent; found=true, value=v if it holds v
//	put(key, value)             -> (nothing); the key holds value
//	del(key)                    -> deleted=true if present (it becomes absent), false if absent
//	cas(key, expected, value)   -> ok=true and the key holds value if it held expected (expected
//	                               null: if it was absent); otherwise ok=false and no change
//
// Operations of unknown outcome (the client got an error such as Unavailable or DeadlineExceeded,
// or its process was killed) may or may not have taken effect, at any moment after their call.
// As Porcupine's users do (e.g. the MIT 6.5840 KV tests), the checker gives them a return time
// after every other event of the history and lets the model accept any output for them: put and
// del always apply, cas applies exactly when its comparison succeeds in the state it is placed
// in. "Applied" is covered by linearizing the operation somewhere inside its interval, "not
// applied" by linearizing it after every other operation (its interval reaches that far), where
// nobody can observe it. A get of unknown outcome constrains nothing and is dropped before the
// check.
package main

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"unicode/utf8"

	"github.com/anishathalye/porcupine"
)

type opKind int

const (
	opGet opKind = iota
	opPut
	opDel
	opCas
)

func (k opKind) String() string {
	return [...]string{"get", "put", "del", "cas"}[k]
}

// kvInput is an operation's call: what the client asked for.
type kvInput struct {
	kind  opKind
	key   string
	value string // put, cas: the value to store
	// cas: the value the key must hold; expectAbsent means the JSON "expected": null (the key
	// must be absent).
	expected     string
	expectAbsent bool
}

// kvOutput is an operation's return: what the client was told.
type kvOutput struct {
	unknown bool   // "return": null
	found   bool   // get
	value   string // get, when found
	deleted bool   // del
	ok      bool   // cas
}

// kvState is one key's state. It is comparable, so Porcupine's default == equality works.
type kvState struct {
	present bool
	value   string
}

// step is the model's transition function: whether op may return out in state s, and the state
// after it. Pure: it only returns a new state.
func step(s kvState, in kvInput, out kvOutput) (bool, kvState) {
	switch in.kind {
	case opGet:
		if out.unknown { // dropped before the check; accepting it keeps step total
			return true, s
		}
		if !out.found {
			return !s.present, s
		}
		return s.present && s.value == out.value, s
	case opPut:
		return true, kvState{true, in.value}
	case opDel:
		if out.unknown {
			return true, kvState{}
		}
		return out.deleted == s.present, kvState{}
	case opCas:
		match := !s.present
		if !in.expectAbsent {
			match = s.present && s.value == in.expected
		}
		next := s
		if match {
			next = kvState{true, in.value}
		}
		if out.unknown {
			return true, next
		}
		return out.ok == match, next
	}
	panic(fmt.Sprintf("unknown operation kind %d", in.kind))
}

// whyNot explains in words why op cannot return out in state s (step said no).
func whyNot(s kvState, in kvInput, out kvOutput) string {
	holds := "the key is absent"
	if s.present {
		holds = "the key holds " + quote(s.value)
	}
	switch in.kind {
	case opGet:
		return "it needs the key to be " + describeGetResult(out) + ", but " + holds
	case opDel:
		if out.deleted {
			return "deleted=true needs the key to be present, but it is absent"
		}
		return "deleted=false needs the key to be absent, but " + holds
	case opCas:
		if out.ok {
			return "ok=true needs the key to be " + describeExpected(in) + ", but " + holds
		}
		return "ok=false needs the key not to be " + describeExpected(in) + ", but it is"
	}
	return "no state allows it"
}

func describeGetResult(out kvOutput) string {
	if !out.found {
		return "absent"
	}
	return quote(out.value)
}

func describeExpected(in kvInput) string {
	if in.expectAbsent {
		return "absent"
	}
	return quote(in.expected)
}

// maxQuoted is how many bytes of a key or value the report and the visualization show.
const maxQuoted = 48

// quote renders a key or value for people: Go-quoted, long ones cut with their length noted.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s...(%d bytes)", strconv.Quote(s[:cut]), len(s))
}

// describeOp renders an operation and its outcome, e.g. `cas(null -> "y") -> ok`.
func describeOp(in kvInput, out kvOutput) string {
	var call string
	switch in.kind {
	case opGet:
		call = "get()"
	case opPut:
		call = "put(" + quote(in.value) + ")"
	case opDel:
		call = "del()"
	case opCas:
		exp := "null"
		if !in.expectAbsent {
			exp = quote(in.expected)
		}
		call = "cas(" + exp + " -> " + quote(in.value) + ")"
	}
	if out.unknown {
		return call + " -> ? (outcome unknown)"
	}
	switch in.kind {
	case opGet:
		if !out.found {
			return call + " -> not found"
		}
		return call + " -> " + quote(out.value)
	case opDel:
		if out.deleted {
			return call + " -> deleted"
		}
		return call + " -> not found"
	case opCas:
		if out.ok {
			return call + " -> ok"
		}
		return call + " -> failed"
	}
	return call
}

func describeState(s kvState) string {
	if !s.present {
		return "absent"
	}
	return quote(s.value)
}

// opMeta is an operation's provenance, kept as Porcupine metadata for the visualization.
type opMeta struct {
	client int64  // the client id of the history file
	source string // file:line
	errMsg string // the "error" the producer noted for an unknown outcome
}

// kvModel is the Porcupine model of one key.
var kvModel = porcupine.Model{
	Init: func() interface{} { return kvState{} },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		ok, next := step(state.(kvState), input.(kvInput), output.(kvOutput))
		return ok, next
	},
	Hash: func(state interface{}) uint64 {
		s := state.(kvState)
		if !s.present {
			return 0
		}
		h := fnv.New64a()
		h.Write([]byte(s.value))
		return h.Sum64() | 1
	},
	DescribeOperation: func(input, output interface{}) string {
		in := input.(kvInput)
		return quote(in.key) + ": " + describeOp(in, output.(kvOutput))
	},
	DescribeState: func(state interface{}) string { return describeState(state.(kvState)) },
	DescribeOperationMetadata: func(info interface{}) string {
		m, ok := info.(opMeta)
		if !ok {
			return ""
		}
		s := fmt.Sprintf("client %d, %s", m.client, m.source)
		if m.errMsg != "" {
			s += ", error: " + m.errMsg
		}
		return s
	},
}

// byKeyModel is kvModel with a partition by key, for one visualization of several keys.
var byKeyModel = func() porcupine.Model {
	m := kvModel
	m.Partition = func(history []porcupine.Operation) [][]porcupine.Operation {
		index := map[string]int{}
		var parts [][]porcupine.Operation
		for _, op := range history {
			key := op.Input.(kvInput).key
			i, ok := index[key]
			if !ok {
				i = len(parts)
				index[key] = i
				parts = append(parts, nil)
			}
			parts[i] = append(parts[i], op)
		}
		return parts
	}
	return m
}()
