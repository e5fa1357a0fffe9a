#!/bin/sh
# pgvector for every local PostgreSQL cluster that lacks it: the Debian package of the
# cluster's major version (postgresql-<major>-pgvector), or, where the release has none,
# Debian's own source package of a newer release built against that major's server headers
# (checksums verified by dpkg-source). Auto memory keeps its memory vectors there (docs/
# deploy.md, "Ranking by meaning"). Needs root and apt; a no-op without a local server or
# once every cluster has the extension. The build's work files go under .cache/pgvector.
set -eu

SOURCE_SUITE="${PGVECTOR_SOURCE_SUITE:-trixie}"
WORK="$(pwd)/.cache/pgvector"

if ! command -v pg_lsclusters >/dev/null 2>&1; then
    exit 0  # no local PostgreSQL server
fi
majors="$(pg_lsclusters -h | awk '{print $1}' | sort -u)"
for major in $majors; do
    pg_config="/usr/lib/postgresql/$major/bin/pg_config"
    if [ -x "$pg_config" ] && [ -f "$($pg_config --sharedir)/extension/vector.control" ]; then
        continue
    fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "pgvector is missing for PostgreSQL $major: install postgresql-$major-pgvector" >&2
        exit 1
    fi
    echo "== installing pgvector for PostgreSQL $major"
    apt-get update -qq
    if apt-get install -y -qq "postgresql-$major-pgvector" >/dev/null 2>&1; then
        continue
    fi
    echo "== no postgresql-$major-pgvector package: building Debian's pgvector source ($SOURCE_SUITE)"
    apt-get install -y -qq "postgresql-server-dev-$major" dpkg-dev gcc make >/dev/null
    # The mirror this machine already uses, with the newer release's sources.
    mirror="$(grep -rhoE '^(URIs: *|deb +)[a-z]+://[^ ]+/debian/?( |$)' /etc/apt/sources.list \
        /etc/apt/sources.list.d/ 2>/dev/null | head -n 1 | sed -E 's/^(URIs: *|deb +)//; s/ *$//')"
    if [ -z "$mirror" ]; then
        echo "no Debian mirror found in the apt sources" >&2
        exit 1
    fi
    mkdir -p "$WORK/lists/partial"
    printf 'deb-src %s %s main\n' "$mirror" "$SOURCE_SUITE" >"$WORK/sources.list"
    set -- -o "Dir::Etc::sourcelist=$WORK/sources.list" -o "Dir::Etc::sourceparts=-" \
        -o "Dir::State::Lists=$WORK/lists"
    apt-get "$@" update -qq
    rm -rf "$WORK/download" "$WORK/build-$major"
    mkdir -p "$WORK/download"
    (cd "$WORK/download" && apt-get "$@" source --download-only -qq pgvector 2>/dev/null)
    dpkg-source -x "$WORK"/download/pgvector_*.dsc "$WORK/build-$major" >/dev/null
    # OPTFLAGS empty: no -march=native (a virtual machine may refuse the host CPU's newest
    # instructions); pgvector picks its fast paths at run time.
    make -s -C "$WORK/build-$major" OPTFLAGS="" PG_CONFIG="$pg_config" >/dev/null
    make -s -C "$WORK/build-$major" OPTFLAGS="" PG_CONFIG="$pg_config" install >/dev/null
done
