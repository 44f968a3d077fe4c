#!/bin/sh
# run_all.sh - runs every tests/tools/test_*.sh (converters, CLI end-to-end checks).
# Each script gets $PYTHON (a python3 that imports numpy), $OMNI (the omniserve
# binary) and $TMP (a scratch dir); exit 0 = pass, 77 = skipped, else fail.
# Last line: "N passed, N failed, N skipped".
pass=0; fail=0; skip=0
TMP=$(mktemp -d /tmp/omni-tools-XXXXXX); export TMP PYTHON OMNI
for t in tests/tools/test_*.sh; do
    [ -e "$t" ] || continue
    out=$(sh "$t" 2>&1); rc=$?
    case $rc in
        0) pass=$((pass+1)); echo "  ok    $t" ;;
        77) skip=$((skip+1)); echo "  skip  $t: $(echo "$out" | tail -n 1)" ;;
        *) fail=$((fail+1)); echo "  FAIL  $t (exit $rc)"; echo "$out" | tail -n 30 | sed 's/^/        /' ;;
    esac
done
rm -rf "$TMP"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
