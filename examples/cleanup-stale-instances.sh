#!/usr/bin/env bash
# The reference's cleanup script against chitin's keys: for every stale
# index entry, remove it from the index and delete the dead instance's
# affinity claims (only those whose value still starts with "<id>:", so a
# target another instance has claimed since is left alone).
#
# Prefer `chitin cluster cleanup-stale`: it does the same in one atomic
# step per instance and also marks the dead instance's running deployments
# failed ("Deployment orphaned: instance <id> died"). This script does not
# touch deployments.
#
# Usage: examples/cleanup-stale-instances.sh [NAMESPACE]   (default: chitin)
#   REDIS_HOST (127.0.0.1), REDIS_PORT (6379), REDISCLI_AUTH as for redis-cli.
#   REDIS_CLUSTER=1 on a Redis Cluster (redis-cli -c follows the slot to
#   its master; pass the hash-tagged namespace, e.g. "{chitin}").
set -euo pipefail

NAMESPACE="${1:-chitin}"
cli() { redis-cli -h "${REDIS_HOST:-127.0.0.1}" -p "${REDIS_PORT:-6379}" ${REDIS_CLUSTER:+-c} --raw "$@"; }

for id in $(cli SMEMBERS "${NAMESPACE}:instances:index"); do
  if [ "$(cli EXISTS "${NAMESPACE}:instances:${id}")" = "0" ]; then
    echo "Removing stale instance: ${id}"
    cli SREM "${NAMESPACE}:instances:index" "${id}" >/dev/null
    for target in $(cli SMEMBERS "${NAMESPACE}:affinity:by-instance:${id}"); do
      value="$(cli GET "${NAMESPACE}:affinity:${target}")"
      if [ "${value#"${id}:"}" != "${value}" ]; then
        cli DEL "${NAMESPACE}:affinity:${target}" >/dev/null
      fi
    done
    cli DEL "${NAMESPACE}:affinity:by-instance:${id}" >/dev/null
  fi
done
