// The report: a verdict line, and for each key that is not linearizable its longest linearizable
// prefix (Porcupine's partial linearization), the key's state after it, and why none of the
// operations that could come next can.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// plural is "1 key", "2 keys".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func (h *history) report(results []keyResult, files []string, o options, elapsed time.Duration,
	stdout, stderr io.Writer) int {
	var failed, unknown []keyResult
	for _, r := range results {
		switch r.result {
		case porcupine.Illegal:
			failed = append(failed, r)
		case porcupine.Unknown:
			unknown = append(unknown, r)
		}
	}
	dropped := ""
	if h.counts.droppedReads > 0 {
		dropped = fmt.Sprintf("; %d read(s) among them left out", h.counts.droppedReads)
	}
	fmt.Fprintf(stdout, "lincheck: %s (%d of unknown outcome%s) by %s on %s, from %s; checked in %.2fs\n",
		plural(h.counts.ops, "operation"), h.counts.unknown, dropped, plural(h.counts.clients, "client"),
		plural(len(h.keys), "key"), plural(len(files), "file"), elapsed.Seconds())
	for _, r := range failed {
		h.explain(stdout, r, o.showOps)
	}

	// The visualization: of the failing keys (checked again together, so that one file shows
	// them all), or of every key.
	var visualKeys []string
	switch {
	case o.html == "" || o.visualize == "never":
	case o.visualize == "always":
		visualKeys = h.keys
	case len(failed) > 0:
		for _, r := range failed {
			visualKeys = append(visualKeys, r.key)
		}
	}
	if len(visualKeys) > 0 {
		if err := h.visualize(visualKeys, o); err != nil {
			fmt.Fprintf(stderr, "lincheck: cannot write the visualization: %v\n", err)
		} else {
			fmt.Fprintf(stdout, "visualization (Porcupine, %s): %s\n", plural(len(visualKeys), "key"), o.html)
		}
	}

	switch {
	case len(failed) > 0:
		var names []string
		for _, r := range failed {
			names = append(names, quote(r.key))
		}
		fmt.Fprintf(stdout, "NOT LINEARIZABLE: %d of %s: %s\n", len(failed), plural(len(h.keys), "key"), strings.Join(names, ", "))
		if len(unknown) > 0 {
			fmt.Fprintf(stdout, "(%d other key(s) not finished within --timeout=%v)\n", len(unknown), o.timeout)
		}
		return exitNotLinearizable
	case len(unknown) > 0:
		var names []string
		for i, r := range unknown {
			if i == 10 {
				names = append(names, fmt.Sprintf("and %d more", len(unknown)-10))
				break
			}
			names = append(names, quote(r.key))
		}
		others := ""
		if len(unknown) < len(h.keys) {
			others = "; the other keys are linearizable"
		}
		fmt.Fprintf(stdout, "UNKNOWN: the check of %d of %s did not finish within --timeout=%v (%s)%s\n",
			len(unknown), plural(len(h.keys), "key"), o.timeout, strings.Join(names, ", "), others)
		return exitUnknown
	}
	fmt.Fprintf(stdout, "OK: linearizable (%s)\n", plural(len(h.keys), "key"))
	return exitLinearizable
}

// visualize checks the given keys again as one partitioned history and writes Porcupine's HTML.
func (h *history) visualize(keys []string, o options) error {
	var ops []porcupine.Operation
	for _, k := range keys {
		ops = append(ops, h.byKey[k]...)
	}
	_, info := porcupine.CheckOperationsVerbose(byKeyModel, ops, o.timeout)
	if dir := os.Getenv("TEST_UNDECLARED_OUTPUTS_DIR"); dir != "" {
		_ = os.MkdirAll(dir, 0o755)
	}
	return porcupine.VisualizePath(byKeyModel, info, o.html)
}

// times renders an operation's interval in microseconds since the history's first call.
func (h *history) times(op porcupine.Operation) string {
	call := float64(op.Call-h.epoch) / 1e3
	if op.Output.(kvOutput).unknown {
		return fmt.Sprintf("[%12.3f, %12s] us", call, "?")
	}
	return fmt.Sprintf("[%12.3f, %12.3f] us", call, float64(op.Return-h.epoch)/1e3)
}

func (h *history) line(op porcupine.Operation, id int) string {
	m := op.Metadata.(opMeta)
	s := fmt.Sprintf("#%-4d client %-4d %s  %s  (%s)", id, m.client, h.times(op),
		describeOp(op.Input.(kvInput), op.Output.(kvOutput)), m.source)
	if m.errMsg != "" {
		s += " error: " + m.errMsg
	}
	return s
}

// explain prints why key r.key is not linearizable.
func (h *history) explain(w io.Writer, r keyResult, showOps int) {
	ops := h.byKey[r.key]
	fmt.Fprintf(w, "\nkey %s: NOT LINEARIZABLE (%d operations)\n", quote(r.key), len(ops))

	// The longest partial linearization Porcupine found (it keeps, for every operation, the
	// longest linearizable prefix that contains it).
	var prefix []int
	partials := r.info.PartialLinearizations()
	if len(partials) == 1 {
		for _, p := range partials[0] {
			if len(p) > len(prefix) {
				prefix = p
			}
		}
	}
	fmt.Fprintf(w, "  longest linearizable prefix found: %d of %d operations, in linearization order:\n",
		len(prefix), len(ops))
	state := kvState{}
	skip := len(prefix) - showOps
	if skip > 0 {
		fmt.Fprintf(w, "    ... %d earlier operation(s)\n", skip)
	}
	for i, id := range prefix {
		var ok bool
		ok, state = step(state, ops[id].Input.(kvInput), ops[id].Output.(kvOutput))
		if !ok { // cannot happen: Porcupine checked this prefix with the same model
			fmt.Fprintf(w, "    (internal error: the prefix does not replay at #%d)\n", id)
		}
		if i >= skip {
			fmt.Fprintf(w, "    %s  => %s\n", h.line(ops[id], id), describeState(state))
		}
	}
	if len(prefix) == 0 {
		fmt.Fprintf(w, "    (none: no operation can be the first)\n")
	}

	// The operations that could be linearized next: those not in the prefix that were called
	// before the earliest return among them (that one must take effect before anything called
	// after it returned).
	in := make([]bool, len(ops))
	for _, id := range prefix {
		in[id] = true
	}
	var rest []int
	firstReturn := int64(0)
	for id := range ops {
		if in[id] {
			continue
		}
		if len(rest) == 0 || ops[id].Return < firstReturn {
			firstReturn = ops[id].Return
		}
		rest = append(rest, id)
	}
	var next []int
	for _, id := range rest {
		if ops[id].Call <= firstReturn {
			next = append(next, id)
		}
	}
	sort.Slice(next, func(i, j int) bool { return ops[next[i]].Call < ops[next[j]].Call })
	fmt.Fprintf(w, "  then the key is %s, and none of the %d operation(s) that could come next can take effect:\n",
		describeState(state), len(next))
	for _, id := range next {
		in, out := ops[id].Input.(kvInput), ops[id].Output.(kvOutput)
		why := ""
		if ok, _ := step(state, in, out); ok {
			why = "it could, but no linearization of the remaining operations continues from there"
		} else {
			why = whyNot(state, in, out)
		}
		fmt.Fprintf(w, "    %s\n        %s\n", h.line(ops[id], id), why)
	}
	if later := len(rest) - len(next); later > 0 {
		fmt.Fprintf(w, "  (%d later operation(s) of this key not shown: they were called after #%d returned)\n",
			later, earliestReturning(ops, rest))
	}
}

func earliestReturning(ops []porcupine.Operation, ids []int) int {
	best := ids[0]
	for _, id := range ids {
		if ops[id].Return < ops[best].Return {
			best = id
		}
	}
	return best
}
