#!/usr/bin/env bash
# fork.sh MODULE NAME [DIR]: make a service of your own from this repository (`make fork
# MODULE=example.com/acme NAME=acme [DIR=…]`).
#
# It works on the repository's tracked files: in place (the default, in your clone, which must
# have no uncommitted change to a tracked file), or on a copy of them in DIR (an empty or new
# directory; the repository is left as it is). Then, in that tree, it
#
#   1. removes what serves this repository's learners and not your service: the training kit
#      (tools/: the drill, the chaos run, the lab), its docs (docs/drills.md, docs/chaos.md, and
#      bench/results/chaos.md, the chaos run's record), the blocks between the markers
#      "fork:drop" and "/fork:drop" in any file (the Makefile's training block, .ci/run's chaos
#      step and this command's own CI step, the README's drill and chaos sections, …) and each
#      line marked "fork:drop-line" (a table's row, a sentence), and this script itself;
#   2. renames the Go module path github.com/oncepay/oncepay to MODULE in every module (the
#      root, idempotent/, examples/, examples/webhook-receiver, bench/): the idempotency kit
#      becomes MODULE/idempotent, because the tree builds the copy it holds (the root go.mod
#      replaces the kit with ./idempotent) and that copy is now yours to change. To follow
#      upstream's kit instead, delete idempotent/ and its replace line and `go get` it;
#   3. renames the product: ONCEPAY → NAME in capitals (every setting, ONCEPAY_* → ACME_*),
#      Oncepay → Name (the webhook headers Oncepay-Signature, …), oncepay → name (metric
#      names oncepay_*, the Redis prefix oncepay:, the test databases' prefix oncepay_t_,
#      cmd/oncepay and bin/oncepay, the docs), and the problem types' base
#      https://oncepay.dev/problems/ → https://MODULE/problems/, an address under your own
#      domain;
#   4. formats the Go files and reports any "oncepay" left (none, with the tree as shipped).
#
# NAME is lower case, a letter then letters or digits, as it must be inside a Go identifier,
# a metric name and an environment variable alike.
set -euo pipefail

die() { echo "fork: $*" >&2; exit 2; }
[ $# -ge 2 ] && [ $# -le 3 ] || die "usage: scripts/fork.sh MODULE NAME [DIR]  (make fork MODULE=example.com/acme NAME=acme [DIR=…])"
module=$1 name=$2 dir=${3:-}
[[ $module =~ ^[a-z0-9][a-z0-9.-]*(/[A-Za-z0-9._~-]+)*$ ]] || die "MODULE $module is not a module path such as example.com/acme"
[[ $name =~ ^[a-z][a-z0-9]*$ ]] || die "NAME $name must be lower case letters and digits, starting with a letter (it goes into Go identifiers, metric names and ACME_* settings)"
[[ ${module,,} != *oncepay* && $name != *oncepay* ]] || die "MODULE and NAME must not contain oncepay: the fork renames every oncepay"
upper=${name^^} title=${name^}

src=$(cd "$(dirname "$0")/.." && pwd)
cd "$src"
git rev-parse --show-toplevel >/dev/null 2>&1 || die "$src is not a git checkout: fork works on the tracked files"
if [ -z "$dir" ]; then
  [ -z "$(git status --porcelain --untracked-files=no)" ] || die "the working tree has uncommitted changes to tracked files: commit them first, or fork into a copy with DIR=…"
  tree=$src
else
  mkdir -p "$dir"
  [ -z "$(ls -A "$dir")" ] || die "DIR $dir is not empty"
  git ls-files -z | xargs -0 cp --parents -t "$dir"
  tree=$(cd "$dir" && pwd)
fi
cd "$tree"
echo "fork: forking $(pwd) as $module ($name)"

# 1. The training kit and what only serves it.
rm -rf tools docs/drills.md docs/chaos.md bench/results/chaos.md .ci/fork scripts/fork.sh
rmdir scripts 2>/dev/null || true
# The tracked files that are left (in place, nothing untracked is touched), text only.
text=()
while IFS= read -r -d '' f; do
  [ -f "$f" ] && grep -Iq . "$f" && text+=("$f")
done < <(git -C "$src" ls-files -z)
# Blocks between a "fork:drop" line and its "/fork:drop" line (Markdown comments, # comments),
# and single lines marked "fork:drop-line" (a table's rows, where a comment line would end the
# table).
grep -lZ 'fork:drop' "${text[@]}" | xargs -0r perl -ni -e '
  if (m{fork:drop-line}) { } elsif (m{/fork:drop}) { $skip = 0 } elsif (m{fork:drop}) { $skip = 1 } elsif (!$skip) { print }
  if (eof) { die "fork: $ARGV: a fork:drop block is not closed\n" if $skip; $skip = 0 }'

# 2 and 3. The module path, then the product's name in its three spellings.
grep -liZ 'oncepay' "${text[@]}" | xargs -0r perl -pi -e '
  BEGIN { ($m, $n, $u, $t) = @ARGV[0..3]; splice @ARGV, 0, 4 }
  s{https://oncepay\.dev/}{https://$m/}g;
  s{github\.com/oncepay/oncepay}{$m}g;
  s{ONCEPAY}{$u}g; s{Oncepay}{$t}g; s{OncePay}{$t}g; s{oncepay}{$n}g;
' "$module" "$name" "$upper" "$title"
# Paths that hold the name, deepest first.
find . -depth -name '*oncepay*' -not -path './.git/*' -not -path './bin/*' -not -path './data/*' | while read -r p; do
  mv "$p" "$(dirname "$p")/$(basename "$p" | sed "s/oncepay/$name/g")"
done

# 4. Imports sort by path, which changed; then what is left of the old name.
find . -name '*.go' -not -path './.git/*' -print0 | xargs -0 gofmt -w
left=$(grep -rIil oncepay . --exclude-dir=.git --exclude-dir=bin --exclude-dir=data || true)
if [ -n "$left" ]; then
  echo "fork: these files still name oncepay:" >&2
  echo "$left" >&2
fi
echo "fork: done. Next: go build ./... && make test; the training kit is gone (tools/), the service is $module, its binary bin/$name, its settings ${upper}_*."
