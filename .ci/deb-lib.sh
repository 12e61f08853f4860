# Shared by .ci/deb and .ci/deb-service: the tools, the package fields
# every package has, the Debian changelog, the copyright file, what a
# binary needs besides itself, and building and checking one package.
# Expects out and version set by the caller.

maintainer=${DEB_MAINTAINER:-pg_webhook_inbox maintainers <maintainers@users.noreply.a-seed-44cf6992.example>}
# A release recorded in sql/RELEASES is <version>-1; a build of a version
# not published yet is <version>~dev-1, which sorts below the release, so
# that apt replaces such a build with the release when it comes.
deb_version() {  # version
    if awk -v v="$1" '!/^#/ && NF == 3 && $1 == v { found = 1 } END { exit !found }' sql/RELEASES; then
        echo "$1-1"
    else
        echo "$1~dev-1"
    fi
}
# shellcheck disable=SC2154 # version is the caller's
debversion=$(deb_version "$version")
# Reproducible: every date and mtime is the last commit's.
epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
export SOURCE_DATE_EPOCH=$epoch

# Debian's packaging tools, installed when missing: lintian, dpkg-dev
# (dpkg-shlibdeps), systemd (systemd-analyze).
need_tools() {
    local missing=() p
    for p in lintian dpkg-dev systemd; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "deb: installing ${missing[*]}" >&2
    local sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
}
need_tools

# The Debian changelog: one entry per package version; the project's own
# CHANGELOG.md goes beside it as the upstream changelog.
debian_changelog() {  # package
    cat <<EOF
$1 ($debversion) unstable; urgency=medium

  * pg_webhook_inbox $version: see changelog.gz beside this file.

 -- $maintainer  $(date -R -u -d "@$epoch")
EOF
}

# Machine-readable copyright (DEP-5), with the Rust crates compiled into
# the package's binary (the crate COPYRIGHT_CRATE, with the cargo options
# COPYRIGHT_FEATURES) and their licenses.
copyright() {
    cat <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: pg_webhook_inbox
Upstream-Contact: $maintainer
EOF
    [ -z "${DEB_HOMEPAGE:-}" ] || echo "Source: $DEB_HOMEPAGE"
    cat <<EOF

Files: *
Copyright: $(date -u -d "@$epoch" +%Y) pg_webhook_inbox maintainers
License: Apache-2.0
Comment: The binary statically links these Rust crates, each under the
 license it declares:
EOF
    local crates
    crates=$(cat <<'PY'
import json, sys
meta = json.load(sys.stdin)
nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
packages = {p["id"]: p for p in meta["packages"]}
root = next(p["id"] for p in meta["packages"] if p["name"] == sys.argv[1])
seen, todo = set(), [root]
while todo:
    node = nodes[todo.pop()]
    for dep in node["deps"]:
        # Proc macros run in the compiler; neither they nor what they
        # use end up in the binary.
        macro = any("proc-macro" in t["kind"] for t in packages[dep["pkg"]]["targets"])
        normal = any(k["kind"] in (None, "normal") for k in dep["dep_kinds"])
        if normal and not macro and dep["pkg"] not in seen:
            seen.add(dep["pkg"])
            todo.append(dep["pkg"])
for pid in sorted(seen, key=lambda i: packages[i]["name"]):
    p = packages[pid]
    print(" %s %s: %s" % (p["name"], p["version"], p.get("license") or "see its source"))
PY
)
    # shellcheck disable=SC2086 # COPYRIGHT_FEATURES is a list of options
    cargo metadata --format-version 1 --locked ${COPYRIGHT_FEATURES:-} 2>/dev/null \
        | python3 -c "$crates" "$COPYRIGHT_CRATE"
    cat <<EOF

License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0, is
 in /usr/share/common-licenses/Apache-2.0.
EOF
}

# Lay out one package's documentation and metadata, then build and check it.
#   build PACKAGE ROOT ARCH DEPENDS SECTION SUMMARY DESCRIPTION
build() {
    local package=$1 root=$2 pkgarch=$3 depends=$4 section=$5 summary=$6 description=$7
    local doc="$root/usr/share/doc/$package"
    mkdir -p "$doc" "$root/DEBIAN"
    copyright > "$doc/copyright"
    debian_changelog "$package" | gzip -9n > "$doc/changelog.Debian.gz"
    gzip -9n < CHANGELOG.md > "$doc/changelog.gz"
    # Directories 755; files as installed, writable by root only.
    find "$root" -path "$root/DEBIAN" -prune -o -type d -exec chmod 755 {} + -o -type f -exec chmod u+rw,go-w {} +
    {
        echo "Package: $package"
        echo "Version: $debversion"
        echo "Architecture: $pkgarch"
        echo "Maintainer: $maintainer"
        echo "Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)"
        echo "Depends: $depends"
        echo "Section: $section"
        echo "Priority: optional"
        [ -z "${DEB_HOMEPAGE:-}" ] || echo "Homepage: $DEB_HOMEPAGE"
        echo "Description: $summary"
        fold -s -w 72 <<< "$description" | sed 's/ *$//; s/^/ /'
    } > "$root/DEBIAN/control"
    (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z \
        | xargs -0 md5sum > DEBIAN/md5sums)
    chmod 644 "$root"/DEBIAN/*
    find "$root" -exec touch -h -d "@$epoch" {} +
    local deb="$out/${package}_${debversion}_${pkgarch}.deb"
    dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
    # No error (E:) from lintian; what it warns is printed.
    local report
    report=$(lintian --allow-root --tag-display-limit 0 "$deb" 2>&1 || true)
    [ -z "$report" ] || echo "$report" >&2
    if grep -q '^E: ' <<< "$report"; then
        echo "deb: lintian reports errors in $deb" >&2
        exit 1
    fi
    echo "$deb"
}

# The Depends a binary's ELF dependencies call for (libc6, libgcc-s1, …),
# from dpkg-shlibdeps, which wants a debian/control to stand in.
shlib_depends() {  # FILE
    local scratch
    scratch=$(mktemp -d)
    mkdir "$scratch/debian"
    printf 'Source: x\n\nPackage: x\nArchitecture: any\n' > "$scratch/debian/control"
    (cd "$scratch" && dpkg-shlibdeps -O --warnings=0 "$1" 2>/dev/null) | sed -n 's/^shlibs:Depends=//p'
    rm -rf "$scratch"
}
