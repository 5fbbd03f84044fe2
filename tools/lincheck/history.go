// Reading histories: the document format ({"operations": [...]}) and the journal format (JSON
// lines, one per call and one per return, appended as they happen), both described in README.md.
// Every error names the file, the line and the field.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// operation is one checked operation: its call, its outcome and where it came from.
type operation struct {
	client int64
	call   int64
	ret    int64 // meaningless when out.unknown
	in     kvInput
	out    kvOutput
	meta   opMeta
}

// inputError is bad input (exit code 2).
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }

func badInput(format string, args ...interface{}) error {
	return &inputError{fmt.Sprintf(format, args...)}
}

// readHistoryFile reads one file of either format. notes are things the user should know that
// do not stop the check.
func readHistoryFile(path string) (ops []operation, notes []string, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, badInput("cannot read history: %v", err)
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		return nil, nil, badInput("%s: empty file (a history with no operations is {\"operations\": []})", path)
	}
	if isDocument(trimmed) {
		ops, err = parseDocument(path, data)
		return ops, nil, err
	}
	return parseJournal(path, data)
}

// isDocument tells the document format from the journal: the document is one object whose
// first member is "operations"; a journal line starts with "id".
func isDocument(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	t, err := dec.Token()
	return err == nil && t == "operations"
}

// lineOf is the 1-based line of byte offset off in data.
func lineOf(data []byte, off int64) int {
	if off > int64(len(data)) {
		off = int64(len(data))
	}
	return bytes.Count(data[:off], []byte("\n")) + 1
}

// syntaxError turns a decoder error into a message with the line it happened on.
func syntaxError(path string, data []byte, base int64, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return badInput("%s:%d: invalid JSON: %v", path, lineOf(data, base+se.Offset), se)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return badInput("%s:%d: invalid JSON: %v", path, lineOf(data, base+te.Offset), te)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return badInput("%s:%d: invalid JSON: the file ends in the middle of a value", path,
			lineOf(data, int64(len(data))))
	}
	return badInput("%s: invalid JSON: %v", path, err)
}

func parseDocument(path string, data []byte) ([]operation, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	expect := func(want json.Delim, what string) error {
		t, err := dec.Token()
		if err != nil {
			return syntaxError(path, data, 0, err)
		}
		if t != want {
			return badInput("%s:%d: expected %s", path, lineOf(data, dec.InputOffset()), what)
		}
		return nil
	}
	if err := expect('{', "{"); err != nil {
		return nil, err
	}
	var ops []operation
	seenOps := false
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, syntaxError(path, data, 0, err)
		}
		name, _ := t.(string)
		if name != "operations" {
			return nil, badInput("%s:%d: unknown top-level field %q (the document has only \"operations\")",
				path, lineOf(data, dec.InputOffset()), name)
		}
		if seenOps {
			return nil, badInput("%s:%d: \"operations\" given twice", path, lineOf(data, dec.InputOffset()))
		}
		seenOps = true
		if err := expect('[', "\"operations\" to be an array"); err != nil {
			return nil, err
		}
		for i := 0; dec.More(); i++ {
			// The object starts at the first '{' after the decoder's position (past ',' and
			// white space); its line is where errors point.
			start := dec.InputOffset()
			if j := bytes.IndexAny(data[start:], "{[\"0123456789-tfn"); j >= 0 {
				start += int64(j)
			}
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, syntaxError(path, data, 0, err)
			}
			where := fmt.Sprintf("%s:%d: operation %d", path, lineOf(data, start), i)
			fields, err := objectFields(raw, where)
			if err != nil {
				return nil, err
			}
			op, err := parseOperation(fields, where)
			if err != nil {
				return nil, err
			}
			op.meta.source = fmt.Sprintf("%s:%d", path, lineOf(data, start))
			ops = append(ops, op)
		}
		if err := expect(']', "] closing \"operations\""); err != nil {
			return nil, err
		}
	}
	if err := expect('}', "} closing the document"); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, badInput("%s:%d: unexpected data after the document", path, lineOf(data, dec.InputOffset()))
	}
	if !seenOps {
		return nil, badInput("%s: the document has no \"operations\" array", path)
	}
	return ops, nil
}

// parseJournal reads the journal format: a call line {"id": N, "client":..., "call":..., "op":...,
// "key":..., ...} for every operation, and a return line {"id": N, "return": T or null, outcome
// fields} for those whose client learnt something. A call without a return line is an operation
// of unknown outcome (its process died).
//
// A last line that is cut short (no newline, not valid JSON) was being written when the process
// died, and is left out with a note: if it is a call line, the process died inside
// HistoryRecorder::Call, before the operation was issued; if it is a return line, the operation
// becomes one of unknown outcome. Both are sound.
func parseJournal(path string, data []byte) (ops []operation, notes []string, err error) {
	type pending struct {
		fields map[string]json.RawMessage
		line   int
		ret    int // line of the return line, 0 if none
	}
	byID := map[int64]*pending{}
	var order []int64
	lines := bytes.Split(data, []byte("\n"))
	var offset int64
	for n, text := range lines {
		lineStart := offset
		offset += int64(len(text)) + 1
		if len(bytes.TrimSpace(text)) == 0 {
			continue
		}
		line := n + 1
		where := fmt.Sprintf("%s:%d", path, line)
		if !json.Valid(text) {
			if n == len(lines)-1 { // no newline after it
				notes = append(notes, fmt.Sprintf("%s: left out the last line, %d, which is cut short "+
					"(its process died while writing it)", path, line))
				break
			}
			var v interface{}
			err := json.Unmarshal(text, &v)
			return nil, nil, syntaxError(path, data, lineStart, err)
		}
		fields, err := objectFields(text, where)
		if err != nil {
			return nil, nil, err
		}
		idRaw, ok := fields["id"]
		if !ok {
			return nil, nil, badInput("%s: missing field \"id\" (a journal line; a document starts with {\"operations\": [)", where)
		}
		id, err := intField(idRaw, where, "id")
		if err != nil {
			return nil, nil, err
		}
		delete(fields, "id")
		_, isReturn := fields["return"]
		p := byID[id]
		if !isReturn {
			if p != nil {
				return nil, nil, badInput("%s: id %d is called twice (first on line %d)", where, id, p.line)
			}
			byID[id] = &pending{fields: fields, line: line}
			order = append(order, id)
			continue
		}
		if p == nil {
			return nil, nil, badInput("%s: return of id %d, which has no call line before it", where, id)
		}
		if p.ret != 0 {
			return nil, nil, badInput("%s: id %d returns twice (first on line %d)", where, id, p.ret)
		}
		p.ret = line
		for name, v := range fields {
			if _, dup := p.fields[name]; dup {
				return nil, nil, badInput("%s: field %q of id %d is on its call line %d already", where, name, id, p.line)
			}
			p.fields[name] = v
		}
	}
	for _, id := range order {
		p := byID[id]
		if p.ret == 0 {
			p.fields["return"] = json.RawMessage("null")
		}
		where := fmt.Sprintf("%s:%d: id %d", path, p.line, id)
		if p.ret != 0 {
			where += fmt.Sprintf(" (returned on line %d)", p.ret)
		}
		op, err := parseOperation(p.fields, where)
		if err != nil {
			return nil, nil, err
		}
		op.meta.source = fmt.Sprintf("%s:%d", path, p.line)
		ops = append(ops, op)
	}
	return ops, notes, nil
}

// objectFields splits a JSON object into its members, rejecting duplicates.
func objectFields(raw []byte, where string) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, badInput("%s: expected a JSON object", where)
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, badInput("%s: invalid JSON: %v", where, err)
		}
		name := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, badInput("%s: invalid JSON in field %q: %v", where, name, err)
		}
		if _, dup := fields[name]; dup {
			return nil, badInput("%s: field %q given twice", where, name)
		}
		fields[name] = v
	}
	return fields, nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func intField(raw json.RawMessage, where, name string) (int64, error) {
	s := string(bytes.TrimSpace(raw))
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, badInput("%s: field %q must be an integer (int64), got %s", where, name, clip(s))
	}
	return v, nil
}

func stringField(raw json.RawMessage, where, name string) (string, error) {
	var s string
	if isNull(raw) || json.Unmarshal(raw, &s) != nil {
		return "", badInput("%s: field %q must be a string, got %s", where, name, clip(string(raw)))
	}
	return s, nil
}

func boolField(raw json.RawMessage, where, name string) (bool, error) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, badInput("%s: field %q must be true or false, got %s", where, name, clip(string(raw)))
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// Fields each kind of operation has: on the call, and on a known outcome.
var (
	commonFields = []string{"client", "call", "return", "op", "key"}
	callFields   = map[opKind][]string{opGet: nil, opPut: {"value"}, opDel: nil,
		opCas: {"expected", "value"}, opSetxx: {"value"}, opGetset: {"value"}, opAppend: {"value"},
		opExists: nil, opIncr: {"delta"}}
	outcomeFields = map[opKind][]string{opGet: {"found"}, opPut: nil, opDel: {"deleted"},
		opCas: {"ok"}, opSetxx: {"ok"}, opGetset: {"found"}, opAppend: {"length"},
		opExists: {"found"}, opIncr: {"failed"}}
)

// resultField is the outcome field holding the value a get, getset or incr returned: "old" for
// getset, whose call has a "value" of its own (a journal merges call and return lines).
func resultField(k opKind) string {
	if k == opGetset {
		return "old"
	}
	return "value"
}

// parseOperation validates one operation's fields (a journal's call and return lines merged).
func parseOperation(f map[string]json.RawMessage, where string) (op operation, err error) {
	for _, name := range commonFields {
		if _, ok := f[name]; !ok {
			hint := ""
			if name == "return" {
				hint = " (null for an operation of unknown outcome)"
			}
			return op, badInput("%s: missing field %q%s", where, name, hint)
		}
	}
	if op.client, err = intField(f["client"], where, "client"); err != nil {
		return
	}
	if op.client < 0 {
		return op, badInput("%s: field \"client\" must be >= 0, got %d", where, op.client)
	}
	if op.call, err = intField(f["call"], where, "call"); err != nil {
		return
	}
	op.out.unknown = isNull(f["return"])
	if !op.out.unknown {
		if op.ret, err = intField(f["return"], where, "return"); err != nil {
			return
		}
		if op.ret < op.call {
			return op, badInput("%s: \"return\" %d is before \"call\" %d", where, op.ret, op.call)
		}
	}
	kindName, err := stringField(f["op"], where, "op")
	if err != nil {
		return
	}
	known := false
	for k, name := range opNames {
		if name == kindName {
			op.in.kind, known = opKind(k), true
		}
	}
	if !known {
		return op, badInput("%s: field \"op\" must be one of %s, got %q", where,
			strings.Join(opNames[:], ", "), kindName)
	}
	if op.in.key, err = stringField(f["key"], where, "key"); err != nil {
		return
	}
	allowed := map[string]bool{"error": true}
	for _, name := range commonFields {
		allowed[name] = true
	}
	for _, name := range callFields[op.in.kind] {
		allowed[name] = true
		if _, ok := f[name]; !ok {
			return op, badInput("%s: %s needs field %q", where, kindName, name)
		}
	}
	if !op.out.unknown {
		for _, name := range outcomeFields[op.in.kind] {
			allowed[name] = true
			if _, ok := f[name]; !ok {
				return op, badInput("%s: %s that returned needs field %q", where, kindName, name)
			}
		}
	}
	if (op.in.kind == opGet || op.in.kind == opGetset || op.in.kind == opIncr) && !op.out.unknown {
		allowed[resultField(op.in.kind)] = true
	}
	var extra []string
	for name := range f {
		if !allowed[name] {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		why := ""
		if op.out.unknown {
			why = " (outcome fields are not allowed on an operation of unknown outcome)"
		}
		return op, badInput("%s: unexpected field(s) %s for %s%s", where, strings.Join(extra, ", "), kindName, why)
	}
	if raw, ok := f["error"]; ok {
		if op.meta.errMsg, err = stringField(raw, where, "error"); err != nil {
			return
		}
	}
	switch op.in.kind {
	case opGet, opGetset:
		if op.in.kind == opGetset {
			if op.in.value, err = stringField(f["value"], where, "value"); err != nil {
				return
			}
		}
		if op.out.unknown {
			break
		}
		if op.out.found, err = boolField(f["found"], where, "found"); err != nil {
			return
		}
		raw, hasValue := f[resultField(op.in.kind)]
		if op.out.found {
			if !hasValue {
				return op, badInput("%s: %s with \"found\": true needs field %q", where, kindName, resultField(op.in.kind))
			}
			if op.out.value, err = stringField(raw, where, resultField(op.in.kind)); err != nil {
				return
			}
		} else if hasValue && !isNull(raw) {
			return op, badInput("%s: %s with \"found\": false must have no %q (or null)", where, kindName, resultField(op.in.kind))
		}
	case opSetxx:
		if op.in.value, err = stringField(f["value"], where, "value"); err != nil {
			return
		}
		if !op.out.unknown {
			if op.out.ok, err = boolField(f["ok"], where, "ok"); err != nil {
				return
			}
		}
	case opAppend:
		if op.in.value, err = stringField(f["value"], where, "value"); err != nil {
			return
		}
		if !op.out.unknown {
			if op.out.length, err = intField(f["length"], where, "length"); err != nil {
				return
			}
		}
	case opExists:
		if !op.out.unknown {
			if op.out.found, err = boolField(f["found"], where, "found"); err != nil {
				return
			}
		}
	case opIncr:
		if op.in.delta, err = intField(f["delta"], where, "delta"); err != nil {
			return
		}
		if op.out.unknown {
			break
		}
		if op.out.failed, err = boolField(f["failed"], where, "failed"); err != nil {
			return
		}
		raw, hasValue := f["value"]
		if !op.out.failed {
			if !hasValue {
				return op, badInput("%s: incr with \"failed\": false needs field \"value\"", where)
			}
			if op.out.value, err = stringField(raw, where, "value"); err != nil {
				return
			}
		} else if hasValue && !isNull(raw) {
			return op, badInput("%s: incr with \"failed\": true must have no \"value\" (or null)", where)
		}
	case opPut:
		if op.in.value, err = stringField(f["value"], where, "value"); err != nil {
			return
		}
	case opDel:
		if !op.out.unknown {
			if op.out.deleted, err = boolField(f["deleted"], where, "deleted"); err != nil {
				return
			}
		}
	case opCas:
		if isNull(f["expected"]) {
			op.in.expectAbsent = true
		} else if op.in.expected, err = stringField(f["expected"], where, "expected"); err != nil {
			return
		}
		if op.in.value, err = stringField(f["value"], where, "value"); err != nil {
			return
		}
		if !op.out.unknown {
			if op.out.ok, err = boolField(f["ok"], where, "ok"); err != nil {
				return
			}
		}
	}
	op.meta.client = op.client
	return op, nil
}

// checkClients rejects a history in which one client's completed operations overlap in time: a
// client runs one operation at a time, so that means two producers used the same client id (ids
// must be unique across all the files of a history) or a broken clock. Operations of unknown
// outcome are exempt: a client may go on after a timeout while the old operation's interval
// stays open.
func checkClients(ops []operation) error {
	byClient := map[int64][]*operation{}
	for i := range ops {
		if !ops[i].out.unknown {
			byClient[ops[i].client] = append(byClient[ops[i].client], &ops[i])
		}
	}
	var clients []int64
	for client := range byClient {
		clients = append(clients, client)
	}
	sort.Slice(clients, func(i, j int) bool { return clients[i] < clients[j] })
	for _, client := range clients {
		list := byClient[client]
		sort.Slice(list, func(i, j int) bool { return list[i].call < list[j].call })
		for i := 1; i < len(list); i++ {
			a, b := list[i-1], list[i]
			if b.call < a.ret {
				return badInput("client %d runs two operations at once: %s [%d, %d] and %s [%d, %d] "+
					"(client ids must be unique across the files of a history, and a client runs one "+
					"operation at a time)", client, a.meta.source, a.call, a.ret, b.meta.source, b.call, b.ret)
			}
		}
	}
	return nil
}

// unknownReturn is the return time given to operations of unknown outcome: after every event.
func unknownReturn(ops []operation) int64 {
	var last int64 = math.MinInt64
	for _, op := range ops {
		if op.call > last {
			last = op.call
		}
		if !op.out.unknown && op.ret > last {
			last = op.ret
		}
	}
	if last == math.MaxInt64 {
		return last
	}
	return last + 1
}
