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
