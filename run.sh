#!/usr/bin/env bash
# Entry point for sqlengine: sets up the environment from a fresh clone and runs things.
#
#   ./run.sh setup          Java 17 check (installs it with apt-get when root), .venv, deps pinned by constraints.txt
#   ./run.sh demo [args]    the main job: sqlengine run examples/shop.sql (a generator source, views, file sinks)
#   ./run.sh demo-api       the Python API demo (python -m sqlengine.demo)
#   ./run.sh test [args]    the docs build (mkdocs build --strict), then the test suite (pytest); CI runs it via .ci/run
#   ./run.sh docs           the user documentation (MkDocs), built into site/
#   ./run.sh bench [args]   the benchmark suite (python -m benchmarks.suite --scale smoke|small|full)
set -euo pipefail

cd "$(dirname "$0")"
ROOT="$PWD"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

log() { echo "[run.sh] $*" >&2; }
die() { echo "[run.sh] ERROR: $*" >&2; exit 1; }

usage() {
    cat <<EOF
usage: ./run.sh <command> [args]

commands:
  setup           check/install Java 17, create .venv, install deps (pyproject.toml ranges, constraints.txt pins; idempotent)
  demo [args]     run the main job: sqlengine run examples/shop.sql --exit-when-done [args], then query its views
  demo-api [args] the Python API demo: python -m sqlengine.demo [--bids N] [--steps N] [--out DIR] [--seed N]
  test [args]     build the docs (mkdocs build --strict, into a temporary directory), then run the test suite:
                  python -m pytest -q [pytest args]
  docs            only build the docs (mkdocs build --strict) into site/
  bench [args]    run the benchmark suite: python -m benchmarks.suite [--scale smoke|small|full] [args]
EOF
}

# --------------------------------------------------------------------------- Java 17
is_java17() {  # $1: path to a java binary
    [ -n "${1:-}" ] && [ -x "$1" ] || return 1
    "$1" -version 2>&1 | grep -Eq 'version "17([."]|$)'
}

find_java17() {  # prints the path of a Java 17 binary, if any
    local cand
    for cand in "$(command -v java 2>/dev/null || true)" "${JAVA_HOME:+$JAVA_HOME/bin/java}" \
                /usr/lib/jvm/java-17-*/bin/java /usr/lib/jvm/*-17-*/bin/java; do
        if is_java17 "$cand"; then
            echo "$cand"
            return 0
        fi
    done
    return 1
}

java_install_help() {
    cat >&2 <<EOF
[run.sh] ERROR: Java 17 is required (Spark runs on the JVM) but was not found.
  Debian/Ubuntu:  sudo apt-get update && sudo apt-get install -y openjdk-17-jre-headless
  Fedora/RHEL:    sudo dnf install -y java-17-openjdk-headless
  macOS:          brew install openjdk@17
  other:          https://adoptium.net/temurin/releases/?version=17
Then make sure 'java -version' reports 17 (or set JAVA_HOME to a Java 17 install) and re-run ./run.sh setup.
EOF
}

setup_java() {
    local java
    if ! java="$(find_java17)"; then
        if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
            log "Java 17 not found; installing openjdk-17-jre-headless with apt-get"
            DEBIAN_FRONTEND=noninteractive apt-get update
            DEBIAN_FRONTEND=noninteractive apt-get install -y openjdk-17-jre-headless
            java="$(find_java17)" || { java_install_help; exit 1; }
        else
            java_install_help
            exit 1
        fi
    fi
    local real
    real="$(readlink -f "$java" 2>/dev/null || true)"
    if [ -n "$real" ]; then
        export JAVA_HOME="$(dirname "$(dirname "$real")")"
        export PATH="$JAVA_HOME/bin:$PATH"
    fi
}

# --------------------------------------------------------------------------- Chromium (console tests)
setup_browser() {  # the web console's browser tests (tests/server/test_console.py) need chromium + chromedriver
    if command -v chromedriver >/dev/null 2>&1 && { command -v chromium >/dev/null 2>&1 \
            || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1; }; then
        return 0
    fi
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
        log "chromium/chromedriver not found; installing chromium and chromium-driver with apt-get"
        DEBIAN_FRONTEND=noninteractive apt-get update \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver \
            || log "could not install chromium; the browser tests of the console will be skipped"
    fi
}

# --------------------------------------------------------------------------- PostgreSQL (connector tests)
setup_postgres() {  # tests/connectors/test_postgres.py starts PostgreSQL 15 with wal2json; Spark reads it with the JDBC jar
    if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && ls /usr/lib/postgresql/*/lib/wal2json.so >/dev/null 2>&1 \
            && [ -f /usr/share/java/postgresql.jar ]; then
        return 0
    fi
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
        log "PostgreSQL/wal2json/JDBC driver not found; installing them with apt-get"
        DEBIAN_FRONTEND=noninteractive apt-get update \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql postgresql-15-wal2json libpostgresql-jdbc-java \
            || log "could not install PostgreSQL; the PostgreSQL connector tests will be skipped"
    fi
}

# --------------------------------------------------------------------------- Python venv
sha1_of() {
    if command -v sha1sum >/dev/null 2>&1; then sha1sum "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then shasum -a 1 "$1" | cut -d' ' -f1
    else python3 -c 'import hashlib,sys; print(hashlib.sha1(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
    fi
}

setup_venv() {
    if [ ! -x "$PY" ]; then
        command -v python3 >/dev/null 2>&1 || die "python3 (>= 3.10) is required but was not found on PATH"
        python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' \
            || die "python3 >= 3.10 is required, found $(python3 --version 2>&1)"
        log "creating $VENV"
        python3 -m venv "$VENV" || die "python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)"
    fi
    # reinstall when either the declared ranges or the exact pins change
    local stamp="$VENV/.installed-$(sha1_of "$ROOT/pyproject.toml")-$(sha1_of "$ROOT/constraints.txt")"
    if [ ! -f "$stamp" ]; then
        log "installing dependencies (pyproject.toml, pinned by constraints.txt) into .venv"
        "$PY" -m pip install -q --upgrade pip
        "$PY" -m pip install -q -c constraints.txt -e ".[test,docs]"
        rm -f "$VENV"/.installed-*
        touch "$stamp"
    fi
}

setup() {
    setup_java
    setup_venv
    export PYSPARK_PYTHON="$PY"
    export PYSPARK_DRIVER_PYTHON="$PY"
}

# --------------------------------------------------------------------------- docs
build_docs() {  # $1: the output directory. strict: a broken link, anchor or nav entry fails (not with --quiet,
                #     which drops the warnings strict mode counts)
    local out="$1"
    log "building the docs: mkdocs build --strict -> $out"
    NO_MKDOCS_2_WARNING=1 "$PY" -m mkdocs build --strict --site-dir "$out" || die "mkdocs build --strict failed (see above)"
    [ "$out" = "$ROOT/site" ] || rm -rf "$out"
}

# --------------------------------------------------------------------------- commands
cmd="${1:-}"
[ $# -gt 0 ] && shift

case "$cmd" in
    setup)
        setup
        log "ready: $("$PY" --version 2>&1), JAVA_HOME=${JAVA_HOME:-unset}"
        ;;
    demo)
        setup
        rm -rf out/shop.storage out/revenue_by_region out/top_customers
        "$VENV/bin/sqlengine" run examples/shop.sql --storage out/shop.storage --exit-when-done "$@"
        echo
        echo "$ sqlengine query out/shop.storage \"SELECT * FROM top_customers ORDER BY revenue DESC\""
        "$VENV/bin/sqlengine" query out/shop.storage "SELECT * FROM top_customers ORDER BY revenue DESC"
        echo "files written by the view's sinks: out/revenue_by_region/snapshot.csv, out/top_customers/step-*.parquet"
        ;;
    demo-api)
        setup
        exec "$PY" -m sqlengine.demo "$@"
        ;;
    test)
        setup
        build_docs "$(mktemp -d)"
        setup_browser
        setup_postgres
        PYSPARK_PYTHON="$PWD/.venv/bin/python" exec "$PY" -m pytest -q "$@"
        ;;
    docs)
        setup
        build_docs "$ROOT/site"
        log "docs built into site/ (open site/index.html)"
        ;;
    bench)
        setup
        exec "$PY" -m benchmarks.suite "$@"
        ;;
    -h|--help|help)
        usage
        ;;
    "")
        usage >&2
        exit 1
        ;;
    *)
        echo "[run.sh] unknown command: $cmd" >&2
        usage >&2
        exit 2
        ;;
esac
