// lincheck: checks a recorded history of key-value operations for linearizability, with
// Porcupine (github.com/anishathalye/porcupine, vendored).
//
//	bazel build //tools/lincheck
//	bazel-bin/tools/lincheck/lincheck [--timeout=30s] [--html=out.html] history.json [more.json ...]
//
// Each file is a history in the document format ({"operations": [...]}) or the journal format
// (JSON lines, as kv/history.h's HistoryRecorder appends them), both described in README.md;
// several files (one per process) are merged into one history. The history is partitioned by
// key and each key's operations are checked against the sequential model of model.go.
//
// Exit codes: 0 linearizable; 1 not linearizable (the report names each failing key, its longest
// linearizable prefix and why no remaining operation can follow it; Porcupine's HTML
// visualization of the failing keys is written to --html, by default into
// $TEST_UNDECLARED_OUTPUTS_DIR when that is set, so Bazel keeps it with the test's outputs);
// 2 bad input or usage (the message names the file, line and field); 3 unknown: the check did
// not finish within --timeout and found no violation so far.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

const (
	exitLinearizable    = 0
	exitNotLinearizable = 1
	exitBadInput        = 2
	exitUnknown         = 3
)

const usageText = `lincheck: checks a history of key-value operations for linearizability (Porcupine).

Usage: lincheck [flags] HISTORY [HISTORY ...]

Each HISTORY is a file in the document format {"operations": [...]} or the journal format (JSON
lines, one per call and one per return); several files (e.g. one per process) are merged into one
history, so client ids must be unique across them. Operations of unknown outcome ("return": null,
or a journal call without its return) may have taken effect at any time after their call, or never.
The formats are described in tools/lincheck/README.md.

Exit codes:
  0  linearizable
  1  not linearizable: a report per failing key on standard output, and Porcupine's HTML
     visualization of the failing keys (see --html)
  2  bad input or usage: the message names the file, line and field
  3  unknown: the check did not finish within --timeout (no violation found so far)

Flags:
`

type options struct {
	timeout   time.Duration
	html      string
	visualize string
	showOps   int
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lincheck", flag.ContinueOnError)
	var o options
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second,
		"give up after this long and exit 3 (unknown); 0 means no limit")
	fs.StringVar(&o.html, "html", "",
		"where to write Porcupine's HTML visualization; default: $TEST_UNDECLARED_OUTPUTS_DIR/"+
			"lincheck_<first history's name>.html when that variable is set, else none")
	fs.StringVar(&o.visualize, "visualize", "failure",
		"when to write the visualization: failure (of the failing keys), always (every key), never")
	fs.IntVar(&o.showOps, "report_ops", 30,
		"at most this many operations of a failing key's linearizable prefix are listed in the report")
	fs.SetOutput(io.Discard)
	printUsage := func(w io.Writer) {
		fmt.Fprint(w, usageText)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return exitLinearizable
		}
		fmt.Fprintf(stderr, "lincheck: %v (see --help)\n", err)
		return exitBadInput
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "lincheck: no history file given (see --help)")
		return exitBadInput
	}
	switch o.visualize {
	case "failure", "always", "never":
	default:
		fmt.Fprintf(stderr, "lincheck: --visualize must be failure, always or never, got %q\n", o.visualize)
		return exitBadInput
	}
	if o.timeout < 0 {
		fmt.Fprintln(stderr, "lincheck: --timeout must not be negative")
		return exitBadInput
	}
	if o.html == "" && o.visualize != "never" {
		if dir := os.Getenv("TEST_UNDECLARED_OUTPUTS_DIR"); dir != "" {
			o.html = defaultHTMLPath(dir, fs.Arg(0))
		}
	}

	var ops []operation
	for _, path := range fs.Args() {
		fileOps, notes, err := readHistoryFile(path)
		if err != nil {
			fmt.Fprintf(stderr, "lincheck: %v\n", err)
			return exitBadInput
		}
		for _, n := range notes {
			fmt.Fprintf(stderr, "lincheck: note: %s\n", n)
		}
		ops = append(ops, fileOps...)
	}
	if err := checkClients(ops); err != nil {
		fmt.Fprintf(stderr, "lincheck: %v\n", err)
		return exitBadInput
	}
	h := newHistory(ops)
	start := time.Now()
	results := h.checkAll(o.timeout)
	elapsed := time.Since(start)
	return h.report(results, fs.Args(), o, elapsed, stdout, stderr)
}

// defaultHTMLPath picks a file name in dir that no earlier run of this test used.
func defaultHTMLPath(dir, firstHistory string) string {
	base := strings.TrimSuffix(filepath.Base(firstHistory), filepath.Ext(firstHistory))
	path := filepath.Join(dir, "lincheck_"+base+".html")
	for i := 2; ; i++ {
		if _, err := os.Stat(path); os.IsNotExist(err) {
			return path
		}
		path = filepath.Join(dir, fmt.Sprintf("lincheck_%s_%d.html", base, i))
	}
}

// history is the merged history, as Porcupine operations grouped by key.
type history struct {
	keys     []string                         // sorted
	byKey    map[string][]porcupine.Operation // in input order; ids are indices
	clients  map[int64]int                    // client id -> dense index (visualization rows)
	epoch    int64                            // the earliest call: report times are relative to it
	unknownT int64                            // the return time of operations of unknown outcome
	counts   struct{ ops, unknown, droppedReads, clients int }
}

func newHistory(ops []operation) *history {
	h := &history{byKey: map[string][]porcupine.Operation{}, clients: map[int64]int{}}
	var ids []int64
	for i, op := range ops {
		if _, ok := h.clients[op.client]; !ok {
			h.clients[op.client] = 0
			ids = append(ids, op.client)
		}
		if i == 0 || op.call < h.epoch {
			h.epoch = op.call
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for i, id := range ids {
		h.clients[id] = i
	}
	h.unknownT = unknownReturn(ops)
	for _, op := range ops {
		ret := op.ret
		if op.out.unknown {
			ret = h.unknownT
			h.counts.unknown++
			if op.in.kind == opGet || op.in.kind == opExists { // constrains nothing
				h.counts.droppedReads++
				continue
			}
		}
		if _, ok := h.byKey[op.in.key]; !ok {
			h.keys = append(h.keys, op.in.key)
		}
		h.byKey[op.in.key] = append(h.byKey[op.in.key], porcupine.Operation{
			ClientId: h.clients[op.client],
			Input:    op.in,
			Call:     op.call,
			Output:   op.out,
			Return:   ret,
			Metadata: op.meta,
		})
	}
	sort.Strings(h.keys)
	h.counts.ops = len(ops)
	h.counts.clients = len(ids)
	return h
}

// keyResult is the verdict on one key.
type keyResult struct {
	key    string
	result porcupine.CheckResult
	info   porcupine.LinearizationInfo
}

// checkAll checks every key, on as many keys at once as there are CPUs, until the deadline.
func (h *history) checkAll(timeout time.Duration) []keyResult {
	results := make([]keyResult, len(h.keys))
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	next := make(chan int)
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				key := h.keys[i]
				results[i].key = key
				var limit time.Duration
				if !deadline.IsZero() {
					limit = time.Until(deadline)
					if limit <= 0 {
						results[i].result = porcupine.Unknown
						continue
					}
				}
				results[i].result, results[i].info = porcupine.CheckOperationsVerbose(kvModel, h.byKey[key], limit)
			}
		}()
	}
	for i := range h.keys {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
}
