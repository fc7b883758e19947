#!/usr/bin/env bash
# A throw-away PostgreSQL cluster for the tests, from Debian's `postgresql` package (installed
# here, pinned, when missing).
#
#   bash scripts/postgres.sh start DIR   # prints the cluster's URL (postgres://…?sslmode=disable)
#   bash scripts/postgres.sh stop DIR    # stops it; DIR can then be removed
#   bash scripts/postgres.sh resume DIR  # starts a stopped one again, on the same port
#
# The cluster lives in DIR, listens on a free 127.0.0.1 port and on a socket in DIR only, trusts
# local connections (it holds nothing but test databases) and offers TLS with a self-signed
# certificate. PostgreSQL refuses to run as
# root, so as root the cluster belongs to the package's `postgres` user (DIR's parents must let
# it through: `mktemp -d` makes a folder only root can enter, so `chmod 0711` it).
set -euo pipefail
PINNED="15+248+deb12u1"
cmd=${1:?usage: postgres.sh start|stop|resume DIR}
dir=${2:?usage: postgres.sh start|stop|resume DIR}

bin_dir() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1
}

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
start)
  if [ -z "$(bin_dir)" ]; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "postgres: Debian's postgresql package is missing; run this script as root" >&2
      exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    if apt-cache madison postgresql | grep -qF "$PINNED"; then
      apt-get install -y -qq --no-install-recommends "postgresql=$PINNED" >/dev/null
    else
      candidate=$(apt-cache policy postgresql | awk '/Candidate:/ {print $2}')
      echo "!!! postgres: pinned postgresql $PINNED is no longer in the archive; installing $candidate" >&2
      apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    fi
  fi
  bin=$(bin_dir)
  mkdir -p "$dir"
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$dir"
    runuser -u postgres -- test -w "$dir" \
      || { echo "postgres: the postgres user cannot reach $dir (chmod 0711 its parents)" >&2; exit 1; }
  fi
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  # TLS with a self-signed certificate, for the test that connects with `sslmode=require`.
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
    -keyout "$dir/server.key" -out "$dir/server.crt" >/dev/null 2>&1
  chmod 0600 "$dir/server.key"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$dir/server.key" "$dir/server.crt"
  # Many test processes each make a database: room for their pools, and no fsync (the cluster
  # is thrown away). In the cluster's own configuration, so that `resume` starts it alike.
  cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 400
fsync = off
synchronous_commit = off
full_page_writes = off
ssl = on
ssl_cert_file = '$dir/server.crt'
ssl_key_file = '$dir/server.key'
CONF
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null \
    || { cat "$dir/server.log" >&2; exit 1; }
  # Plain connections by default (a TLS handshake per test connection costs time); a test asks
  # for TLS with `sslmode=require`.
  echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  ;;
stop)
  bin=$(bin_dir)
  [ -d "$dir/data" ] && as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
  ;;
resume)
  # A stopped cluster again, on the same port (a test of a database that went away).
  bin=$(bin_dir)
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null \
    || { cat "$dir/server.log" >&2; exit 1; }
  ;;
*)
  echo "usage: postgres.sh start|stop|resume DIR" >&2
  exit 2
  ;;
esac
