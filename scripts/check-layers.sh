#!/usr/bin/env bash
# check-layers — the rules between src/ folders (docs/architecture.md), checked from the source
# text alone: every violation is printed as FILE:LINE and the rule it breaks.
#
#   common/                    includes nothing of another src/ folder
#   kernel/, sandbox/, model/  include nothing of http/ or api/ (api/ alone speaks HTTP)
#                              and write no HTTP status (a heuristic: see below)
#   kernel/, sandbox/          include nothing of model/
#   sandbox/                   includes nothing of kernel/
#   no circle                  inside any folder of a program (cellboxd's common/ http/ api/
#                              model/ kernel/ sandbox/ daemon/; cellbox-kernel's runtime/ and
#                              its Python package; the cli's cli/): no two files reach each other
#                              through the functions they define (in Python, the modules they
#                              import); nor between those folders (arrows run one way)
#
# Circles are found through calls rather than #include lines alone: a file without a header of
# its own (its verbs declared in another file's header) closes a circle no include shows. An edge
# A.c -> B.c is a name A.c uses that B.c defines (not static); a circle is files that reach each
# other along such edges. A local name spelled like another file's function (a parameter called
# kernel_id beside kernel_id()) counts as a use: rename it. Each program is read on its own, so
# the same name in two programs (zygote.c in kernel/ and in runtime/) is no edge.
#
# Usage: scripts/check-layers.sh [--warn-only]   (make layers)
# Exits 1 when a rule is broken; --warn-only reports the same and exits 0.
set -u
cd "$(dirname "$0")/.."
warn_only=false
[ "${1:-}" = "--warn-only" ] && warn_only=true
violations=0

# report RULE: each grep -Hn hit on stdin is printed as "FILE:LINE: RULE: the line" and counted.
report() {
    local hit file rest text
    while IFS= read -r hit; do
        [ -n "$hit" ] || continue
        file=${hit%%:*} rest=${hit#*:}
        text=${rest#*:}
        echo "$file:${rest%%:*}: $1: ${text#"${text%%[![:space:]]*}"}"
        violations=$((violations + 1))
    done
}

# forbid RULE FOLDERS PATTERN: an #include "X/..." with X matching PATTERN in FOLDERS' files.
forbid() {
    local rule=$1 folders=$2 pattern=$3 files=()
    for folder in $folders; do
        files+=("$folder"/*.[ch])
    done
    report "$rule" < <(grep -HnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"($pattern)/" \
                           "${files[@]}" 2>/dev/null)
}

forbid "common/ includes only common/" \
    src/common "http|api|kernel|model|sandbox|runtime|daemon|cli"
forbid "kernel/, sandbox/ and model/ include nothing of http/ or api/" \
    "src/kernel src/sandbox src/model" "http|api"
forbid "kernel/ and sandbox/ include nothing of model/" "src/kernel src/sandbox" "model"
forbid "sandbox/ includes nothing of kernel/" src/sandbox "kernel"

# Below api/ an error is a kind (or errno) that api/ maps to a status: an HTTP status written
# there (a name with http_status, a 4xx/5xx stored in a status or returned) is reported.
report "kernel/, sandbox/ and model/ say what went wrong, api/ picks the HTTP status" < <(
    grep -HnE 'http_status|status = [1-5][0-9]{2}\b|\? *[45][0-9]{2}\b *:|return [45][0-9]{2};' \
        src/kernel/*.[ch] src/sandbox/*.[ch] src/model/*.[ch] 2>/dev/null |
        grep -vE '^[^:]+:[0-9]+:[[:space:]]*(\*[[:space:]]|/\*|//)') # comments may name statuses

# circles PROGRAM_FOLDERS...: awk reads the folders' *.c and *.py twice (pass=1, pass=2): first the
# public functions each file defines, then the names each uses. It prints one block per circle
# inside a folder, then per circle between folders, each edge with where it is first used.
circles() {
    local files=()
    shopt -s nullglob
    for folder in "$@"; do
        files+=("$folder"/*.c "$folder"/*.py)
    done
    shopt -u nullglob
    awk '
    function strip(line) {
        if (in_comment) {
            if (!sub(/^([^*]|\*+[^*\/])*\*+\//, "", line))
                return ""
            in_comment = 0
        }
        gsub(/"([^"\\]|\\.)*"/, "\"\"", line)
        gsub(/\x27([^\x27\\]|\\.)*\x27/, "0", line)
        gsub(/\/\*([^*]|\*+[^*\/])*\*+\//, " ", line)
        sub(/\/\/.*/, "", line)
        if (match(line, /\/\*/)) {
            line = substr(line, 1, RSTART - 1)
            in_comment = 1
        }
        return line
    }
    function folder_of(file) { sub(/\/[^\/]*$/, "/", file); return file }
    # closes reach[] (a SUBSEP-keyed set of edges between the keys of nodes[]) transitively
    function close_over(nodes, reach,    i, j, k) {
        for (k in nodes) for (i in nodes) if ((i, k) in reach)
            for (j in nodes) if ((k, j) in reach)
                reach[i, j] = 1
    }
    # prints each circle of nodes[] along reach[], titled, with the first use of each edge in it
    function print_circles(title, nodes, reach, used_at,    a, b, edge, ends, members, placed) {
        for (a in nodes) {
            if (a in placed || !((a, a) in reach))
                continue
            members = ""
            for (b in nodes)
                if ((a, b) in reach && (b, a) in reach) {
                    placed[b] = 1
                    members = members (members == "" ? "" : " ") b
                }
            print title (title ~ /in $/ ? folder_of(a) : "") ": " members
            for (edge in used_at) {
                split(edge, ends, SUBSEP)
                if ((a, ends[1]) in reach && (ends[1], a) in reach &&
                    (a, ends[2]) in reach && (ends[2], a) in reach)
                    print "  " used_at[edge]
            }
        }
    }
    # an edge from file `from` to file `to`, first seen at `where`
    function add_edge(from, to, where,    from_folder, to_folder) {
        from_folder = folder_of(from)
        to_folder = folder_of(to)
        if (from_folder == to_folder) {
            if (!((from, to) in used_at))
                used_at[from, to] = where
            reach[from, to] = 1
        } else {
            if (!((from_folder, to_folder) in folder_used_at))
                folder_used_at[from_folder, to_folder] = where
            folder_reach[from_folder, to_folder] = 1
        }
    }
    FNR == 1 { in_comment = 0; files[FILENAME] = 1; folders[folder_of(FILENAME)] = 1 }
    # Python (the kernel'"'"'s package): an edge is an import of a sibling module, "from .X import
    # ..." or "from . import X", at the top or inside a function
    FILENAME ~ /\.py$/ {
        if (pass == 2 && match($0, /^[ \t]*from \.[A-Za-z0-9_]* import /)) {
            module = substr($0, RSTART, RLENGTH)
            sub(/^[ \t]*from \./, "", module)
            sub(/ import $/, "", module)
            n = split(module != "" ? module : substr($0, RSTART + RLENGTH), words, /[^A-Za-z0-9_]+/)
            for (i = 1; i <= n; i++) {
                to = folder_of(FILENAME) words[i] ".py"
                if (to in files && to != FILENAME)
                    add_edge(FILENAME, to, FILENAME ":" FNR ": imports " words[i])
            }
        }
        next
    }
    {
        line = strip($0)
        if (pass == 1) {
            # a definition: at column 0, not static, not a prototype (no ";" at the end); main()
            # is every program'"'"'s and nobody'"'"'s edge
            if (line ~ /^[A-Za-z_]/ && line !~ /^(static|typedef|extern|struct [A-Za-z_]+ *\{)/ &&
                line !~ /;[[:space:]]*$/ && match(line, /[A-Za-z_][A-Za-z0-9_]*\(/)) {
                name = substr(line, RSTART, RLENGTH - 1)
                if (name != "main" &&
                    line ~ /^[A-Za-z_][A-Za-z0-9_ \t\*]*[ \t\*][A-Za-z_][A-Za-z0-9_]*\(/)
                    defined_in[name] = FILENAME
            }
            next
        }
        n = split(line, words, /[^A-Za-z0-9_]+/)
        for (i = 1; i <= n; i++) {
            if (!(words[i] in defined_in) || defined_in[words[i]] == FILENAME)
                continue
            to = defined_in[words[i]]
            add_edge(FILENAME, to, FILENAME ":" FNR ": uses " words[i] " (" to ")")
        }
    }
    END {
        close_over(files, reach) # files of two folders never share an edge here
        print_circles("circle in ", files, reach, used_at)
        close_over(folders, folder_reach)
        print_circles("circle between folders", folders, folder_reach, folder_used_at)
    }
    ' pass=1 "${files[@]}" pass=2 "${files[@]}"
}

found=$(circles src/common src/http src/api src/model src/kernel src/sandbox src/daemon
        circles src/runtime src/runtime/python/cellbox_kernel
        circles src/cli)
if [ -n "$found" ]; then
    echo "$found"
    violations=$((violations + $(grep -c '^circle' <<<"$found")))
fi

if [ "$violations" -gt 0 ]; then
    echo "layers: $violations rule(s) broken$($warn_only && echo ' (reported only: --warn-only)')"
    $warn_only || exit 1
else
    echo "layers: every rule holds"
fi
