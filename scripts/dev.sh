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

web_ui="http://localhost:8233  (filter: TrainqState=\"Running\")"
if bin/temporal operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; then
  echo "A Temporal server already answers at $TEMPORAL_ADDRESS; using it."
  web_ui="${TRAINQ_WEB_UI:-the one of the server at $TEMPORAL_ADDRESS (none started here)}"
else
  # trainq's search attributes, and task readers without the single-shard rate limit that
  # adds ~45 ms to every task (protocol.DevServerArgs, shared with the tests' dev servers).
  mapfile -t sa < <(bin/trainq-worker dev-server-args)
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

# The REST API, with a local admin token made on first start (only its hash
# is in .data/api-tokens.yaml; the token itself is kept in .data/api-token).
api_token=
if [ -x bin/trainq-api ]; then
  export TRAINQ_API_TOKENS=${TRAINQ_API_TOKENS:-.data/api-tokens.yaml}
  if [ ! -s .data/api-token ]; then
    api_user=$(printf '%s' "${USER:-dev}" | tr -cd 'A-Za-z0-9._@-'); api_user=${api_user:-dev}
    (umask 077; bin/trainq-api token --tokens "$TRAINQ_API_TOKENS" --user "$api_user" --workspace default --role admin >.data/api-token)
  fi
  api_token=$(cat .data/api-token)
  echo "Starting trainq-api on http://127.0.0.1:8080 (log .data/api.log); token: $api_token"
  echo "Dashboard: http://127.0.0.1:8080/ui/#token=$api_token"
  bin/trainq-api --listen 127.0.0.1:8080 >>.data/api.log 2>&1 &
  pids+=($!)
fi

if [ "$mode" = demo ]; then
  bin/trainq demo
  # The same story through ML Space's client_lib, as a notebook would run it.
  if [ -n "$api_token" ] && command -v python3 >/dev/null 2>&1; then
    echo
    echo "The priorities page's job again, submitted through client_lib (examples/notebook.py):"
    python3 - <<'PY' || echo "trainq-api did not answer on 127.0.0.1:8080; see .data/api.log"
import time, urllib.request
for _ in range(60):
    try:
        urllib.request.urlopen("http://127.0.0.1:8080/readyz", timeout=2)
        break
    except Exception:
        time.sleep(0.5)
else:
    raise SystemExit(1)
PY
    TRAINQ_API_URL=http://127.0.0.1:8080 TRAINQ_API_TOKEN="$api_token" PYTHONPATH=python/client_lib \
      python3 examples/notebook.py --allocation default --region SR006 || echo "the client_lib step failed; the rest of trainq keeps running"
  fi
fi

cat <<MSG

trainq is running.
  Web UI:        $web_ui
  Submit a job:  bin/trainq submit --script 'echo hello; sleep 30' --instance-type a100.1gpu --allocation demo
  See the queue: bin/trainq queue demo
  List jobs:     bin/trainq list
  Watch a job:   bin/trainq watch <job-name>
  REST API:      http://127.0.0.1:8080/public/v2/openapi.json
  API token:     ${api_token:-(bin/trainq-api not built)}
                 curl -H "Authorization: Bearer ${api_token:-TOKEN}" http://127.0.0.1:8080/public/v2/jobs
  Ctrl-C stops the worker and the dev server.
MSG
wait
