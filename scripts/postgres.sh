#!/usr/bin/env bash
# Start (or stop) a throwaway PostgreSQL server on a Unix socket: for the tests, or to try gpuseat's
# PostgreSQL course store.
#   eval "$(bash scripts/postgres.sh start DIR)"   → exports GPUSEAT_TEST_PG_URL (the tests' database)
#   bash scripts/postgres.sh stop DIR
# Two databases: gpuseat_test for the tests (GPUSEAT_TEST_PG_URL: each test makes and drops its own
# schema there) and gpuseat for you. gpuseat itself reads GPUSEAT_DB_URL (or --db URL), never the
# test variable; the start prints the line to set it (on stderr, and as a comment in what eval reads).
set -euo pipefail
action=${1:-} dir=${2:-}
if [ -z "$dir" ] || { [ "$action" != start ] && [ "$action" != stop ]; }; then
  echo "usage: bash scripts/postgres.sh start|stop DIR" >&2
  exit 2
fi
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
run() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
case $action in
  start)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)  # the URL needs an absolute socket folder
    [ "$(id -u)" = 0 ] && chown postgres "$dir"
    run "$bin/initdb" -D "$dir/data" -U gpuseat --auth=trust >/dev/null
    # Throwaway (stop deletes it): no fsync and no full-page images, as PostgreSQL's docs allow for data that
    # can be made again. A commit is still written to the kernel before it is acknowledged
    # (synchronous_commit stays on), so a killed server or client loses no acknowledged write; only a crash of
    # the machine could. The PostgreSQL tests ran 15-20% faster (tests/store on 2 cores, 2026-12-08).
    run "$bin/pg_ctl" -D "$dir/data" -o "-k $dir -c listen_addresses='' -c fsync=off -c full_page_writes=off" \
      -l "$dir/log" -w start >/dev/null
    run "$bin/createdb" -h "$dir" -U gpuseat gpuseat_test
    run "$bin/createdb" -h "$dir" -U gpuseat gpuseat
    user_url="postgresql+psycopg://gpuseat@/gpuseat?host=$dir"
    echo "export GPUSEAT_TEST_PG_URL='postgresql+psycopg://gpuseat@/gpuseat_test?host=$dir'"
    echo "# to use this server as gpuseat's course store: export GPUSEAT_DB_URL='$user_url'"
    {
      echo "PostgreSQL is running on the socket in $dir (stop it: bash scripts/postgres.sh stop $dir)."
      echo "GPUSEAT_TEST_PG_URL is for the tests only. For gpuseat itself, set GPUSEAT_DB_URL (or pass --db):"
      echo "  export GPUSEAT_DB_URL='$user_url'"
      echo "  gpuseat course create examples/course-2016.toml   # needs the [postgres] extra"
    } >&2
    ;;
  stop)
    run "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    rm -rf "$dir"
    ;;
esac
