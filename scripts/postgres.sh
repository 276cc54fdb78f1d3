#!/usr/bin/env bash
# A PostgreSQL server for modelcd's state: Dagster's instance storage (database dagster) and MLflow's backend store
# (database mlflow), owned by the role modelcd. It listens on 127.0.0.1 only, on a free port chosen at first start
# and kept after; data, socket, log, port and the generated password (0600) live in $MODELCD_HOME/postgres.
# To change the password, delete that file and start again (a running server: stop, then start).
#
#   scripts/postgres.sh start    start it (initializing it, and installing Debian's postgresql, the first time);
#                                prints the Dagster URL on stdout; already running: prints it
#   scripts/postgres.sh stop     stop it (fast shutdown: open sessions are ended, nothing committed is lost)
#   scripts/postgres.sh status   exit 0 and where it runs, or exit 3 when it is not running
#   scripts/postgres.sh url [dagster|mlflow]    the connection URL of one database (default dagster), in SQLAlchemy's
#                                form naming the psycopg2 driver (psql takes it without '+psycopg2')
#
# modelcd reads MODELCD_PG_URL (modelcd_assets/lib/operations/settings.py), e.g. MODELCD_PG_URL=$(scripts/postgres.sh url) make up.
# MODELCD_PG_BIN may name a folder holding initdb, pg_ctl, postgres and psql when Debian's layout is not there.
set -euo pipefail
cd "$(dirname "$0")/.."

ROLE=modelcd
DATABASES=(dagster mlflow)

die() { echo "postgres.sh: $*" >&2; exit 1; }
say() { echo "postgres.sh: $*" >&2; }

home=${MODELCD_HOME:-.modelcd}
dir=$(realpath -m -- "$home/postgres")
data=$dir/data
port_file=$dir/port
password_file=$dir/password
log=$dir/server.log
is_root=$([ "$(id -u)" = 0 ] && echo 1 || echo 0)

# The server refuses to run as root, so as root it runs as the postgres user, which needs a way into the folder.
# Fd 9 holds this script's lock: a server that inherited it would hold the lock for its whole life.
as_server() {
  if [ "$is_root" = 1 ]; then
    (cd / && runuser -u postgres -- "$@") 9>&-
  else
    "$@" 9>&-
  fi
}

bin_dir() {
  if [ -n "${MODELCD_PG_BIN:-}" ]; then
    [ -x "$MODELCD_PG_BIN/initdb" ] || die "MODELCD_PG_BIN=$MODELCD_PG_BIN has no initdb; point it at the folder holding initdb, pg_ctl, postgres and psql"
    echo "$MODELCD_PG_BIN"
    return
  fi
  # A cluster keeps the major version it was created with.
  if [ -f "$data/PG_VERSION" ]; then
    local v
    v=$(cat "$data/PG_VERSION")
    [ -x "/usr/lib/postgresql/$v/bin/initdb" ] || die "$data was created by PostgreSQL $v, whose binaries are not in /usr/lib/postgresql/$v/bin; install postgresql-$v, or remove $dir to start afresh (its data is lost)"
    echo "/usr/lib/postgresql/$v/bin"
    return
  fi
  local found
  found=$(newest_bin)
  if [ -z "$found" ]; then
    install_postgres
    found=$(newest_bin)
    [ -n "$found" ] || die "installed postgresql, but found no /usr/lib/postgresql/*/bin/initdb; set MODELCD_PG_BIN to the folder holding initdb"
  fi
  echo "$found"
}

newest_bin() {  # the bin folder of the newest PostgreSQL in Debian's layout; nothing when there is none
  local all=(/usr/lib/postgresql/*/bin/initdb)
  [ -x "${all[0]}" ] || return 0
  printf '%s\n' "${all[@]}" | sort -V | tail -1 | sed 's|/initdb$||'
}

install_postgres() {
  [ "$is_root" = 1 ] || die "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb) and installing it needs root: run 'sudo apt-get install postgresql', or set MODELCD_PG_BIN to a folder holding initdb, pg_ctl, postgres and psql"
  command -v apt-get >/dev/null || die "PostgreSQL is not installed and apt-get is not available; install PostgreSQL 13 or later and set MODELCD_PG_BIN to the folder holding initdb"
  say "installing Debian's postgresql package (once)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq postgresql >/dev/null 2>&1; then
    # A fresh machine may have no package lists yet.
    apt-get update -qq >/dev/null 2>&1 || true
    apt-get install -y -qq postgresql >/dev/null || die "'apt-get install postgresql' failed (output above); install it yourself or set MODELCD_PG_BIN"
  fi
}

running() { [ -f "$data/PG_VERSION" ] && as_server "$1/pg_ctl" -D "$data" status >/dev/null 2>&1; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pick_port() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 40000))
    if port_free "$p"; then echo "$p"; return; fi
  done
  die "found no free port on 127.0.0.1 in 50 tries"
}

psql_admin() {  # SQL on stdin, as the cluster's superuser over the unix socket (peer authentication)
  as_server "$1/psql" -X -q -v ON_ERROR_STOP=1 -h "$dir" -p "$(cat "$port_file")" -d postgres -At
}

url_of() {
  if [ ! -f "$password_file" ] || [ ! -f "$port_file" ]; then
    die "no server set up under $dir; run 'scripts/postgres.sh start' first"
  fi
  echo "postgresql+psycopg2://$ROLE:$(cat "$password_file")@127.0.0.1:$(cat "$port_file")/$1"
}

initialize() {
  local bin=$1
  mkdir -p "$dir"
  chmod 700 "$dir"
  if [ "$is_root" = 1 ]; then
    chown postgres:postgres "$dir"
    as_server test -w "$dir" || die "the postgres user cannot write to $dir: a parent folder is not traversable by it (mode 0700?); run 'chmod o+x' on the parents or set MODELCD_HOME under a folder it can reach"
  fi
  say "initializing a cluster in $data"
  as_server "$bin/initdb" -D "$data" --no-locale --encoding=UTF8 --auth-local=peer --auth-host=scram-sha-256 >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; die "initdb failed (output above, also in $dir/initdb.log)"; }
  cat >>"$data/postgresql.conf" <<EOF

# modelcd (scripts/postgres.sh): loopback only; the socket beside the data. The port is passed at start.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
EOF
}

provision() {  # the role (its password is the file's, every start) and the databases, each owned by the role
  local bin=$1 pw
  if [ ! -f "$password_file" ]; then
    (umask 077 && od -An -tx1 -N24 /dev/urandom | tr -d ' \n' >"$password_file")
  fi
  chmod 600 "$password_file"
  pw=$(cat "$password_file")
  psql_admin "$bin" <<EOF
SELECT 'CREATE ROLE $ROLE LOGIN' WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$ROLE')\\gexec
ALTER ROLE $ROLE WITH LOGIN PASSWORD '$pw';
$(for db in "${DATABASES[@]}"; do echo "SELECT 'CREATE DATABASE $db OWNER $ROLE' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '$db')\\gexec"; done)
EOF
}

start() {
  local bin port
  # 107 bytes is the limit on a unix socket's path.
  [ ${#dir} -le 90 ] || die "$dir is too long for PostgreSQL's unix socket (at most 90 characters); set MODELCD_HOME to a shorter path"
  bin=$(bin_dir)
  mkdir -p "$dir"
  exec 9>>"$dir/.lock"
  flock 9
  if running "$bin"; then
    url_of dagster
    return
  fi
  [ -f "$data/PG_VERSION" ] || initialize "$bin"
  port=$(cat "$port_file" 2>/dev/null || true)
  if [ -n "$port" ] && ! port_free "$port"; then
    say "port $port, recorded in $port_file, is taken by another program; choosing another (the URL changes)"
    port=
  fi
  [ -n "$port" ] || port=$(pick_port)
  echo "$port" >"$port_file"
  if ! as_server "$bin/pg_ctl" -D "$data" -l "$log" -o "-p $port" -w -t 60 start >/dev/null; then
    tail -n 20 "$log" >&2 || true
    die "the server did not start (log above, all of it in $log)"
  fi
  provision "$bin"
  say "running on 127.0.0.1:$port, data in $data (PostgreSQL $(cat "$data/PG_VERSION"))"
  url_of dagster
}

stop() {
  [ -f "$data/PG_VERSION" ] || { say "no server set up under $dir; nothing to stop"; return; }
  local bin
  bin=$(bin_dir)
  exec 9>>"$dir/.lock"
  flock 9
  if ! running "$bin"; then
    say "not running"
    return
  fi
  as_server "$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null || die "the server did not stop within 60 s; see $log"
  say "stopped"
}

status() {
  if [ ! -f "$data/PG_VERSION" ]; then
    echo "no server set up under $dir ('scripts/postgres.sh start' sets one up)"
    exit 3
  fi
  local bin
  bin=$(bin_dir)
  if running "$bin"; then
    echo "running on 127.0.0.1:$(cat "$port_file"), data in $data, pid $(head -1 "$data/postmaster.pid")"
  else
    echo "stopped (data in $data; 'scripts/postgres.sh start' starts it)"
    exit 3
  fi
}

url() {
  local db=${1:-dagster}
  [[ " ${DATABASES[*]} " == *" $db "* ]] || die "no database '$db'; choose one of: ${DATABASES[*]}"
  [ -f "$data/PG_VERSION" ] || die "no server set up under $dir; run 'scripts/postgres.sh start' first"
  local bin
  bin=$(bin_dir)
  running "$bin" || die "the server under $dir is not running; run 'scripts/postgres.sh start'"
  url_of "$db"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  url) url "${2:-}" ;;
  *) die "usage: scripts/postgres.sh start|stop|status|url [dagster|mlflow]" ;;
esac
