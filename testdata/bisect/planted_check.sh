#!/usr/bin/env bash
# planted_check.sh OP ACTION FILE: a planted regression for the bisection
# tests: "bad" (exit 1) once FILE's log holds an accepted decision on op OP
# whose action starts with ACTION, else good.
set -euo pipefail
op=$1 action=$2 file=$3
# The whole text first: grep -q on a pipe would stop reading early, and
# dump-ir's SIGPIPE would then decide the pipeline's status.
text=$("${BIN:-tools}/dump-ir/dump-ir" "$file")
! grep -q "^  accepted #[0-9]* ($op) \"$action" <<<"$text"
