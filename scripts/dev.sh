#!/usr/bin/env bash
# Starts a Temporal dev server (Web UI on :8233, state in .data/) and a
# trainq-worker, optionally plays the demo, and keeps running until Ctrl-C,
# which stops everything this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-dev}
mkdir -p .data
export TEMPORAL_ADDRESS=${TEMPORAL_ADDRESS:-127.0.0.1:7233}
port=${TEMPORAL_ADDRESS##*:}

pids=()
cleanup() {
  trap - EXIT INT TERM
  echo
  echo "Stopping trainq-worker and the Temporal dev server..."
  for ((i=${#pids[@]}-1; i>=0; i--)); do kill "${pids[i]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

if bin/temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; then
  echo "A Temporal server already answers at $TEMPORAL_ADDRESS; using it."
else
  sa=()
  for a in TrainqState TrainqPriority TrainqAllocation TrainqRegion TrainqAuthor TrainqWorkspace TrainqKind; do sa+=(--search-attribute "$a=Keyword"); done
  for a in TrainqAttempt TrainqGPUs; do sa+=(--search-attribute "$a=Int"); done
  echo "Starting the Temporal dev server on $TEMPORAL_ADDRESS (Web UI http://localhost:8233, log .data/temporal.log)..."
  bin/temporal server start-dev --ip 127.0.0.1 --port "$port" --ui-port 8233 \
    --db-filename .data/temporal.db --log-level warn "${sa[@]}" >.data/temporal.log 2>&1 &
  pids+=($!)
  for i in $(seq 1 120); do
    if bin/temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; then break; fi
    if ! kill -0 "${pids[0]}" 2>/dev/null; then echo "The dev server did not start; see .data/temporal.log:"; tail -20 .data/temporal.log; exit 1; fi
    sleep 0.5
  done
fi

echo "Starting trainq-worker (log .data/worker.log)..."
bin/trainq-worker >>.data/worker.log 2>&1 &
pids+=($!)

if [ "$mode" = demo ]; then
  bin/trainq demo
fi

cat <<MSG

trainq is running.
  Web UI:        http://localhost:8233  (filter: TrainqState="Running")
  Submit a job:  bin/trainq submit --script 'echo hello; sleep 30' --instance-type a100.1gpu --allocation demo
  See the queue: bin/trainq queue demo
  List jobs:     bin/trainq list
  Watch a job:   bin/trainq watch <job-name>
  Ctrl-C stops the worker and the dev server.
MSG
wait
