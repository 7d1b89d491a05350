#!/usr/bin/env bash
# Start (or stop) a throwaway PostgreSQL server on a Unix socket for the store tests.
#   eval "$(bash scripts/postgres.sh start DIR)"   → exports GPUSEAT_TEST_PG_URL
#   bash scripts/postgres.sh stop DIR
set -euo pipefail
action=$1 dir=$2
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
run() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case $action in
  start)
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    run "$bin/initdb" -D "$dir/data" -U gpuseat --auth=trust >/dev/null
    run "$bin/pg_ctl" -D "$dir/data" -o "-k $dir -c listen_addresses=''" -l "$dir/log" -w start >/dev/null
    run "$bin/createdb" -h "$dir" -U gpuseat gpuseat_test
    echo "export GPUSEAT_TEST_PG_URL='postgresql+psycopg://gpuseat@/gpuseat_test?host=$dir'"
    ;;
  stop)
    run "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    rm -rf "$dir"
    ;;
esac
