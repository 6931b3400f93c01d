#!/usr/bin/env bash
# readme_quickstart.sh SOURCE_DIR PYTHON: the README's library example is examples/quickstart.py
# verbatim, and it runs as printed (3 ranks), every inference rank seeing every version.
set -u
src="$1"; py="$2"
block=$(awk '/^<!-- quickstart:/{f=1; next} f && /^```python$/{g=1; next} g && /^```$/{exit} g' "$src/README.md")
diff <(echo "$block") "$src/examples/quickstart.py" >/dev/null ||
  { echo "FAIL: the README's quickstart block differs from examples/quickstart.py"; diff <(echo "$block") "$src/examples/quickstart.py"; exit 1; }
out=$(cd "$src" && timeout 120 mpirun -np 3 "$py" examples/quickstart.py 2>&1)
rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: exit $rc"; echo "$out" | tail -20; exit 1; }
# mpirun forwards each rank's output on its own, so two ranks' lines can meet on one line:
# find each rank's report anywhere, and require every (rank, version) pair with its own value.
seen=$(grep -oE "rank [12]: version [123], qkv_proj \(96, 64\), all [123]\.0: True" <<<"$out" |
       sed -E 's/^rank ([12]): version ([123]), .*all ([123])\.0: True$/\1 \2 \3/' | sort -u)
want=$(printf '%s\n' "1 1 1" "1 2 2" "1 3 3" "2 1 1" "2 2 2" "2 3 3")
[[ "$seen" == "$want" ]] || { echo "FAIL: expected 6 reports 'rank R: version V, ... all V.0: True' (R 1-2, V 1-3); saw (rank version value): $(tr '\n' ';' <<<"$seen")"; echo "$out" | tail -20; exit 1; }
echo "ok: the README's quickstart is examples/quickstart.py and runs as printed (6 of 6 reports True)"
