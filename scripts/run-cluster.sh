#!/usr/bin/env bash
# Starts a three-node Cairn cluster on 127.0.0.1 for `make run`: node i
# listens on 7650+10*(i-1) .. 7654+10*(i-1), keeps its data in ./data/n<i>,
# creates queues on first use (--auto-create), and all three stop on Ctrl-C.
set -euo pipefail
BIN=${BIN:-bin/cairn}
DATA=${DATA:-./data}
pids=()
stop() {
  trap - INT TERM
  echo
  echo "cairn: stopping the three nodes"
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  exit 0
}
trap stop INT TERM
join="127.0.0.1:7653,127.0.0.1:7663,127.0.0.1:7673"
for i in 1 2 3; do
  base=$((7650 + 10 * (i - 1)))
  mkdir -p "$DATA/n$i"
  "$BIN" server --node-id "n$i" --data-dir "$DATA/n$i" --bootstrap-expect 3 --join "$join" \
    --client-addr "127.0.0.1:$base" --peer-addr "127.0.0.1:$((base + 1))" --raft-addr "127.0.0.1:$((base + 2))" \
    --gossip-addr "127.0.0.1:$((base + 3))" --http-addr "127.0.0.1:$((base + 4))" --auto-create \
    2> >(sed -u "s/^/[n$i] /" >&2) &
  pids+=($!)
done
for i in $(seq 1 100); do
  if curl -sf http://127.0.0.1:7654/readyz >/dev/null && curl -sf http://127.0.0.1:7664/readyz >/dev/null && curl -sf http://127.0.0.1:7674/readyz >/dev/null; then
    break
  fi
  sleep 0.2
done
cat <<MSG

cairn: a three-node cluster runs on 127.0.0.1 (data in $DATA/n1..n3):
  n1 clients 127.0.0.1:7650   n2 clients 127.0.0.1:7660   n3 clients 127.0.0.1:7670
The CLI talks to n1 by default; to spread over all three:
  export CAIRN_SERVER=127.0.0.1:7650,127.0.0.1:7660,127.0.0.1:7670
Try: $BIN cluster status     Ctrl-C stops all three.

MSG
wait "${pids[@]}"
