#!/usr/bin/env bash
# `sluice profile` on 2 ranks (self-launched) writes a Profile with one entry
# per graph node; a missing -o is a usage error (exit 2).
source "$(dirname "$0")/lib.sh"
small=(--set model.layers=2 --set model.embd=64 --set model.heads=4 --set model.block_size=32)
"$SLUICE" profile "$ROOT/configs/quickstart.yaml" "${small[@]}" -o "$TMP/prof.pb" >"$TMP/out.log" 2>&1 ||
  { cat "$TMP/out.log"; fail "profile failed"; }
[ -s "$TMP/prof.pb" ] || fail "no profile written"
nodes=$("$SLUICE" graph "$ROOT/configs/quickstart.yaml" "${small[@]}" | tail -1 | awk '{print $1}')
grep -q "^profile of graph [0-9a-f]*: $nodes nodes" "$TMP/out.log" || { cat "$TMP/out.log"; fail "summary does not list $nodes nodes"; }
grep -q "machine: p2p [1-9]" "$TMP/out.log" || { cat "$TMP/out.log"; fail "p2p bandwidth not measured"; }
expect_failure missing_output "profile needs -o FILE" "$TMP/none" -- "$SLUICE" profile "$ROOT/configs/quickstart.yaml"
echo "ok: profile of $nodes nodes"
