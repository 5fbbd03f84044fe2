#!/bin/bash
# Run a two-process (server + client) test and succeed only if both sides exit 0.
#
#   tests/softiwarp/pair.sh [--port PORT] [--delay SECS] [--timeout SECS] 'SERVER CMD' 'CLIENT CMD'
#
# Both commands are bash command lines (so they may use $FARM_TEST_HOST and friends). The server
# starts first. The client starts once the server listens on --port (a TCP socket or an rdma_cm id;
# the right choice under slow emulation, where a server can take seconds to start), or else after
# --delay seconds (default 1). Each side gets --timeout seconds (default 120). Output of each side is prefixed with "server| " or "client| ".
# Meant for the SoftiWARP guest (see README.md), but works anywhere both sides can reach each other.
set -euo pipefail

delay=1
limit=120
port=""
while [ $# -gt 0 ]; do
    case "$1" in
        --port) port=$2; shift 2 ;;
        --delay) delay=$2; shift 2 ;;
        --timeout) limit=$2; shift 2 ;;
        --) shift; break ;;
        -*) echo "pair.sh: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
[ $# -eq 2 ] || { echo "usage: pair.sh [--port P] [--delay S] [--timeout S] 'SERVER CMD' 'CLIENT CMD'" >&2; exit 2; }
server_cmd=$1
client_cmd=$2

# True if a TCP socket, or an RDMA CM id (how rdma_cm servers listen; on Soft-RoCE they have no
# TCP socket), listens on the port.
listening() {
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q . ||
        rdma res show cm_id 2>/dev/null | grep -q "state LISTEN .*:$1\b"
}

# Prefix every line of a stream so the two interleaved outputs stay readable.
label() { sed -u "s/^/$1| /"; }

echo "pair: server: $server_cmd"
timeout -k 5 "$limit" bash -c "$server_cmd" > >(label server) 2>&1 &
server=$!
if [ -n "$port" ]; then
    # Poll (bounded by --timeout) until something listens on the port, or the server dies.
    waited=0
    until listening "$port"; do
        kill -0 "$server" 2>/dev/null || break
        if [ "$waited" -ge $((limit * 5)) ]; then
            echo "pair: server did not listen on port $port within ${limit}s"
            kill -TERM "$server" 2>/dev/null; wait "$server" 2>/dev/null
            exit 1
        fi
        sleep 0.2
        waited=$((waited + 1))
    done
else
    sleep "$delay"
fi
if ! kill -0 "$server" 2>/dev/null; then
    # It already exited: collect its status (a server that quits before any client is a failure
    # even with rc 0, but report the rc we have).
    set +e; wait "$server"; src=$?; set -e
    echo "pair: server exited before the client started (rc=$src)"
    exit $(( src == 0 ? 1 : src ))
fi

echo "pair: client: $client_cmd"
set +e
timeout -k 5 "$limit" bash -c "$client_cmd" 2>&1 | label client
crc=${PIPESTATUS[0]}
# The server normally ends by itself right after the client; give it a few seconds, then stop it.
for _ in $(seq 50); do kill -0 "$server" 2>/dev/null || break; sleep 0.2; done
kill -TERM "$server" 2>/dev/null
wait "$server"
src=$?
set -e
sleep 0.1   # let the server's label process flush its last lines

echo "pair: server rc=$src client rc=$crc"
[ "$src" -eq 0 ] && [ "$crc" -eq 0 ]
