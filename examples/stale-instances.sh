#!/usr/bin/env bash
# List stale entries of chitin's instance registry: ids in
# {ns}:instances:index whose instance key {ns}:instances:{id} has expired
# (the instance stopped heartbeating). The reference's operator loop,
# unchanged apart from the namespace.
#
# Usage: examples/stale-instances.sh [NAMESPACE]      (default: chitin)
#   Redis is reached with redis-cli; set REDIS_HOST (127.0.0.1),
#   REDIS_PORT (6379) and, if needed, REDISCLI_AUTH (the password).
#   REDIS_CLUSTER=1 on a Redis Cluster (redis-cli -c follows the slot to
#   its master; pass the hash-tagged namespace, e.g. "{chitin}").
# Prints one line per stale id, "Stale: <id>", and nothing else.
# `chitin cluster cleanup-stale` removes them (and fails their orphaned
# deployments); examples/cleanup-stale-instances.sh is the shell-only way.
set -euo pipefail

NAMESPACE="${1:-chitin}"
cli() { redis-cli -h "${REDIS_HOST:-127.0.0.1}" -p "${REDIS_PORT:-6379}" ${REDIS_CLUSTER:+-c} --raw "$@"; }

for id in $(cli SMEMBERS "${NAMESPACE}:instances:index"); do
  if [ "$(cli EXISTS "${NAMESPACE}:instances:${id}")" = "0" ]; then
    echo "Stale: ${id}"
  fi
done
