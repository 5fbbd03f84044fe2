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
//	                               (a put-if-absent is a cas with expected null)
//	setxx(key, value)           -> ok=true and the key holds value if it was present; otherwise
//	                               ok=false and no change (put-if-present)
//	getset(key, value)          -> found, value as get returns them (the old value); the key holds
//	                               value
//	append(key, value)          -> length: the length of the key's value + value (value alone if
//	                               it was absent), which the key then holds
//	exists(key)                 -> found=true iff present; no change
//	incr(key, delta)            -> value: the key's integer (0 if absent) + delta, in decimal, which
//	                               the key then holds; failed=true and no change if the key holds no
//	                               integer as Redis reads one (redisInt) or the sum leaves int64
//
// Operations of unknown outcome (the client got an error such as Unavailable or DeadlineExceeded,
// or its process was killed) may or may not have taken effect, at any moment after their call.
// As Porcupine's users do (e.g. the MIT 6.5840 KV tests), the checker gives them a return time
// after every other event of the history and lets the model accept any output for them: put and
// del always apply, cas applies exactly when its comparison succeeds in the state it is placed
// in. "Applied" is covered by linearizing the operation somewhere inside its interval, "not
// applied" by linearizing it after every other operation (its interval reaches that far), where
// nobody can observe it. A get or exists of unknown outcome constrains nothing and is dropped
// before the check; setxx and incr of unknown outcome apply exactly when they would succeed, as
// cas; getset and append always apply.
package main

import (
	"fmt"
	"hash/fnv"
	"math"
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
	opSetxx
	opGetset
	opAppend
	opExists
	opIncr
)

var opNames = [...]string{"get", "put", "del", "cas", "setxx", "getset", "append", "exists", "incr"}

func (k opKind) String() string {
	return opNames[k]
}

// kvInput is an operation's call: what the client asked for.
type kvInput struct {
	kind  opKind
	key   string
	value string // put, cas, setxx, getset: the value to store; append: the suffix
	delta int64  // incr
	// cas: the value the key must hold; expectAbsent means the JSON "expected": null (the key
	// must be absent).
	expected     string
	expectAbsent bool
}

// kvOutput is an operation's return: what the client was told.
type kvOutput struct {
	unknown bool   // "return": null
	found   bool   // get, getset, exists
	value   string // get, getset: when found; incr: the new value, unless failed
	deleted bool   // del
	ok      bool   // cas, setxx
	failed  bool   // incr: refused (no integer, or an overflow)
	length  int64  // append
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
	case opSetxx:
		next := s
		if s.present {
			next = kvState{true, in.value}
		}
		if out.unknown {
			return true, next
		}
		return out.ok == s.present, next
	case opGetset:
		next := kvState{true, in.value}
		if out.unknown {
			return true, next
		}
		if !out.found {
			return !s.present, next
		}
		return s.present && s.value == out.value, next
	case opAppend:
		next := kvState{true, s.value + in.value}
		if out.unknown {
			return true, next
		}
		return out.length == int64(len(next.value)), next
	case opExists:
		return out.unknown || out.found == s.present, s
	case opIncr:
		sum, applies := incr(s, in.delta)
		next := s
		if applies {
			next = kvState{true, strconv.FormatInt(sum, 10)}
		}
		if out.unknown {
			return true, next
		}
		if out.failed {
			return !applies, s
		}
		return applies && out.value == next.value, next
	}
	panic(fmt.Sprintf("unknown operation kind %d", in.kind))
}

// incr is the sum an incr of delta gives in state s, and whether it applies: the key holds an
// integer (absent counts as 0) and the sum fits int64.
func incr(s kvState, delta int64) (int64, bool) {
	var now int64
	if s.present {
		var ok bool
		if now, ok = redisInt(s.value); !ok {
			return 0, false
		}
	}
	if (delta > 0 && now > math.MaxInt64-delta) || (delta < 0 && now < math.MinInt64-delta) {
		return 0, false
	}
	return now + delta, true
}

// redisInt reads a decimal int64 as Redis does (string2ll; kv/kv.cc's ParseRedisInteger): an
// optional '-', then digits, the first not '0' unless the string is "0" (neither "007" nor "-0"),
// nothing else (no '+', no spaces), within int64.
func redisInt(v string) (int64, bool) {
	if v == "0" {
		return 0, true
	}
	digits := v
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || digits[0] < '1' || digits[0] > '9' {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64) // the digits are checked: only the range can fail
	return n, err == nil
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
	case opSetxx:
		if out.ok {
			return "ok=true needs the key to be present, but it is absent"
		}
		return "ok=false needs the key to be absent, but " + holds
	case opGetset:
		return "it needs the key to be " + describeGetResult(out) + " before, but " + holds
	case opAppend:
		return fmt.Sprintf("length %d needs a value of %d bytes before, but %s", out.length,
			out.length-int64(len(in.value)), holds)
	case opExists:
		if out.found {
			return "found=true needs the key to be present, but it is absent"
		}
		return "found=false needs the key to be absent, but " + holds
	case opIncr:
		if out.failed {
			return "failed=true needs the key to hold no integer (or an overflow), but " + holds
		}
		if _, applies := incr(s, in.delta); !applies {
			return "a sum needs the key to hold an integer (or be absent), but " + holds
		}
		return "value " + quote(out.value) + " needs the key to be " +
			describeIncrBase(out.value, in.delta) + " before, but " + holds
	}
	return "no state allows it"
}

// describeIncrBase is the value an incr by delta that returned `got` started from.
func describeIncrBase(got string, delta int64) string {
	n, ok := redisInt(got)
	if !ok {
		return "something no incr can give " + quote(got) + " from"
	}
	return quote(strconv.FormatInt(n-delta, 10)) + " (or absent, for 0)"
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
	case opSetxx:
		call = "setxx(" + quote(in.value) + ")"
	case opGetset:
		call = "getset(" + quote(in.value) + ")"
	case opAppend:
		call = "append(" + quote(in.value) + ")"
	case opExists:
		call = "exists()"
	case opIncr:
		call = "incr(" + strconv.FormatInt(in.delta, 10) + ")"
	}
	if out.unknown {
		return call + " -> ? (outcome unknown)"
	}
	switch in.kind {
	case opGet, opGetset:
		if !out.found {
			return call + " -> not found"
		}
		return call + " -> " + quote(out.value)
	case opExists:
		if out.found {
			return call + " -> exists"
		}
		return call + " -> not found"
	case opAppend:
		return call + " -> length " + strconv.FormatInt(out.length, 10)
	case opIncr:
		if out.failed {
			return call + " -> failed"
		}
		return call + " -> " + quote(out.value)
	case opDel:
		if out.deleted {
			return call + " -> deleted"
		}
		return call + " -> not found"
	case opCas, opSetxx:
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
