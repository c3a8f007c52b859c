#!/usr/bin/env bash
# check-layers — the rules between src/ folders (docs/architecture.md), checked from the source
# text alone: every violation is printed as FILE:LINE and the rule it breaks.
#
#   common/                    includes nothing of another src/ folder
#   kernel/, sandbox/, model/  include nothing of http/ or api/ (api/ alone speaks HTTP)
#                              and write no HTTP status (a heuristic: see below)
#   kernel/, sandbox/          include nothing of model/
#   sandbox/                   includes nothing of kernel/
#   api/                       has no circle: no two files reach each other through the
#                              functions their headers declare
#
# The api/ rule looks at calls rather than #include lines alone: a file without a header of its
# own (its verbs declared in another file's header) closes a circle no include shows. An edge
# A.c -> B.c is a name A.c uses that B.c defines (not static); a circle is files that reach
# each other along such edges.
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

# api/ circles. awk reads every api/*.c twice (pass=1, pass=2): first the public functions each
# defines, then the names each uses; it prints one block per circle, each edge with where it is
# first used.
circles=$(awk '
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
    FNR == 1 { in_comment = 0; files[FILENAME] = 1 }
    {
        line = strip($0)
        if (pass == 1) {
            # a definition: at column 0, not static, not a prototype (no ";" at the end)
            if (line ~ /^[A-Za-z_]/ && line !~ /^(static|typedef|extern|struct [A-Za-z_]+ *\{)/ &&
                line !~ /;[[:space:]]*$/ && match(line, /[A-Za-z_][A-Za-z0-9_]*\(/)) {
                name = substr(line, RSTART, RLENGTH - 1)
                if (line ~ /^[A-Za-z_][A-Za-z0-9_ \t\*]*[ \t\*][A-Za-z_][A-Za-z0-9_]*\(/)
                    defined_in[name] = FILENAME
            }
            next
        }
        n = split(line, words, /[^A-Za-z0-9_]+/)
        for (i = 1; i <= n; i++) {
            w = words[i]
            if (w in defined_in && defined_in[w] != FILENAME) {
                edge = FILENAME SUBSEP defined_in[w]
                if (!(edge in used_at))
                    used_at[edge] = FILENAME ":" FNR ": uses " w " (" defined_in[w] ")"
                reach[FILENAME, defined_in[w]] = 1
            }
        }
    }
    END {
        for (k in files) for (i in files) for (j in files)
            if ((i, k) in reach && (k, j) in reach)
                reach[i, j] = 1
        for (a in files) {
            if (a in placed || !((a, a) in reach))
                continue
            members = ""
            for (b in files)
                if ((a, b) in reach && (b, a) in reach) {
                    placed[b] = 1
                    members = members (members == "" ? "" : " ") b
                }
            print "circle in api/: " members
            for (edge in used_at) {
                split(edge, ends, SUBSEP)
                if ((a, ends[1]) in reach && (ends[1], a) in reach &&
                    (a, ends[2]) in reach && (ends[2], a) in reach)
                    print "  " used_at[edge]
            }
        }
    }
' pass=1 src/api/*.c pass=2 src/api/*.c)
if [ -n "$circles" ]; then
    echo "$circles"
    violations=$((violations + $(grep -c '^circle' <<<"$circles")))
fi

if [ "$violations" -gt 0 ]; then
    echo "layers: $violations rule(s) broken$($warn_only && echo ' (reported only: --warn-only)')"
    $warn_only || exit 1
else
    echo "layers: every rule holds"
fi
