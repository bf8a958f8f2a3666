#!/usr/bin/env bash
# Write-audit-publish with nothing but a lakefuse mount, as a job without database credentials
# runs it: shell tools and a Spark job in local mode, no lakefuse command.  Run by
# tests/fuse/test_wap_script.py.  Environment:
#   LAKE       the mount point of every repository        REPO  the repository
#   RUN        a name unique to this run                  SRC   a directory of events-<day>.csv
#   HOOK_URL   a webhook that rejects every request       PYTHON, SPARK_JOB  run the Spark job:
#              "$PYTHON" "$SPARK_JOB" DIR writes a partitioned Parquet dataset into DIR
set -euo pipefail

repo="$LAKE/$REPO"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

say() { printf '== %s\n' "$*"; }
# one line in one write(2): the control file's operation runs before the write returns
put() { printf '%s\n' "$2" > "$1"; }
# fails TEXT CMD...: CMD must fail with TEXT (an errno's message) on its stderr
fails() {
    local want="$1"; shift
    if "$@" 2> "$work/err"; then echo "expected to fail: $*" >&2; return 1; fi
    grep -q "$want" "$work/err" || { echo "failed without '$want': $(cat "$work/err")" >&2; return 1; }
}

say "0. a gate: merges into frozen-$RUN go through a webhook, which rejects them"
mkdir -p "$repo/main/_lakefs_actions"
cat > "$repo/main/_lakefs_actions/gate-$RUN.yaml" <<YAML
name: Gate $RUN
on:
  pre-merge:
    branches: [frozen-$RUN]
hooks:
  - id: gate
    type: webhook
    properties:
      url: "$HOOK_URL"
YAML
put "$repo/main/.lakefuse/commit" "install the merge gate of $RUN"
mkdir "$repo/frozen-$RUN"

say "1. isolate: a branch of its own, made from main"
run="$repo/etl-$RUN"
mkdir "$run"
test "$(cat "$run/.lakefuse/head")" = "$(cat "$repo/main/.lakefuse/head")"

say "2. write a partitioned dataset: events with cp, sales with Spark"
for csv in "$SRC"/events-*.csv; do
    day=$(basename "$csv" .csv); day=${day#events-}
    mkdir -p "$run/tables/events/day=$day"
    cp "$csv" "$run/tables/events/day=$day/part-0.csv"
done
"$PYTHON" "$SPARK_JOB" "$run/tables/sales"
grep -q '^+ tables/sales/_SUCCESS$' "$run/.lakefuse/status"

say "3. audit: commit, then check what the commit holds"
put "$run/.lakefuse/commit" "load $RUN"
commit=$(cat "$run/.lakefuse/commit")
test "$commit" = "$(cat "$run/.lakefuse/head")"
test -z "$(cat "$run/.lakefuse/status")"
for csv in "$SRC"/events-*.csv; do
    day=$(basename "$csv" .csv); day=${day#events-}
    cmp "$csv" "$repo/$commit/tables/events/day=$day/part-0.csv"
done
test -e "$repo/$commit/tables/sales/_SUCCESS"
ls "$repo/$commit/tables/sales"/day=*/part-*.parquet > /dev/null

say "4. publish: the gate says no, main takes it; tag the release"
fails "Operation not permitted" put "$repo/frozen-$RUN/.lakefuse/merge" "etl-$RUN"
grep -q "^error: pre-merge hook 'gate' of action 'Gate $RUN' failed" "$repo/frozen-$RUN/.lakefuse/merge"
test ! -e "$repo/frozen-$RUN/tables"
put "$repo/main/.lakefuse/merge" "etl-$RUN"
test "$(cat "$repo/main/.lakefuse/merge")" = "$(cat "$repo/main/.lakefuse/head")"
put "$repo/main/.lakefuse/tag" "release-$RUN"
ls "$repo" > "$work/refs"
grep -qx "release-$RUN" "$work/refs"

say "5. read it back from the tag's directory"
release="$repo/release-$RUN"
diff -r "$run/tables" "$release/tables"
for csv in "$SRC"/events-*.csv; do
    day=$(basename "$csv" .csv); day=${day#events-}
    cmp "$csv" "$release/tables/events/day=$day/part-0.csv"
done
fails "Read-only file system" touch "$release/tables/x"

say "6. a failing run: its merge conflicts with main, which stays as it is"
bad="$repo/etl-$RUN-bad"
mkdir "$bad"
csvs=("$SRC"/events-*.csv); day=$(basename "${csvs[0]}" .csv); day=${day#events-}
printf 'fixed on main\n' >> "$repo/main/tables/events/day=$day/part-0.csv"
put "$repo/main/.lakefuse/commit" "fix $day"
main_head=$(cat "$repo/main/.lakefuse/head")
printf 'bad run\n' >> "$bad/tables/events/day=$day/part-0.csv"
put "$bad/.lakefuse/commit" "bad run"
fails "Device or resource busy" put "$repo/main/.lakefuse/merge" "etl-$RUN-bad"
grep -qx "conflict: tables/events/day=$day/part-0.csv" "$repo/main/.lakefuse/merge"
test "$(cat "$repo/main/.lakefuse/head")" = "$main_head"
test "$(tail -1 "$repo/main/tables/events/day=$day/part-0.csv")" = "fixed on main"

say "7. throw the rest of the failed run away: reset leaves the branch as its last commit"
printf 'half a part' > "$bad/tables/events/day=$day/part-1.csv"
rm -r "$bad/tables/sales"
test -n "$(cat "$bad/.lakefuse/status")"
put "$bad/.lakefuse/reset" .
test -z "$(cat "$bad/.lakefuse/status")"
test "$(cat "$bad/.lakefuse/reset")" = "$(cat "$bad/.lakefuse/head")"
diff -r "$bad" "$repo/$(cat "$bad/.lakefuse/head")"

say "done: release-$RUN"
