#!/usr/bin/env bash
# Memory plans on real training (the quickstart GPT, 2 stages, 1F1B, 4 steps),
# all from one profile (shared with memory_schedules.sh): the measured peak of allocated bytes per stage is
# within 10% of the plan's prediction (below it, of the prediction without the swap
# window, which counts in-flight I/O whole) when everything is kept, under a budget
# the plan meets by swapping, and under the same budget without a swap tier
# (recompute only), dropout on; the budgets are met and the losses equal
# keeping everything exactly. Then swap directories that cannot work: missing, not a
# directory, tmpfs, read-only, full: a clear error naming the directory,
# a non-zero exit, no hang, and (before training) no output. Last, full
# recompute with fused attention at exactly the smallest budget it names,
# under memory.hard_limit.
source "$(dirname "$0")/lib.sh"
CFG="$ROOT/configs/quickstart.yaml"
# Dropout on: recompute replays the draws from the random key (Note [random streams]).
drop=(--set model.dropout=0.1)
run=(--set training.steps=4 --set logging.interval=2 "${drop[@]}")

cp "$(shared_profile quickstart_dropout)" "$TMP/prof.pb"
source "$(dirname "$0")/memory_lib.sh"
# The budgets: the smallest the partitioner can meet, exactly as it names
# them, with and without a swap tier. Keeping everything needs about 64 MiB on stage 0
# (dropout's masks included), so both plans must swap or recompute.
# (The two searches side by side: a partition run is one thread.)
smallest_budget >"$TMP/budget" &
searching=$!
RBUDGET=$(smallest_budget --set memory.swap=false)
wait $searching
BUDGET=$(cat "$TMP/budget")
[[ -n $BUDGET && -n $RBUDGET ]] || fail "partition does not name the smallest budget that fits"
awk -v a="$BUDGET" -v b="$RBUDGET" 'BEGIN { exit !(a < 48 && b < 56) }' || fail "smallest budgets $BUDGET/$RBUDGET MiB: too close to keeping everything to test a plan"
echo "budgets: $BUDGET MiB with swap, $RBUDGET MiB recompute only"
plan keep
train keep "$TMP/keep.pb"
check_memory keep 0
# DistAdam over 2 replicas: its gradient buckets and moment shards are the
# model's static bytes (not "outside the model"), and its step buffers exist
# only during the step (optim/DistAdamBuckets.h, Note [step buffers]).
dp=(--set pipeline.data_parallel=2 --set optimizer.name=dist_adam --set training.global_batch_size=32)
plan keep_dp "${dp[@]}"
train keep_dp "$TMP/keep_dp.pb" "${dp[@]}"
check_memory keep_dp 0 4

plan swap --budget-mb "$BUDGET"
grep -qE "^  stage .* swap$" "$TMP/swap.plan.log" || { cat "$TMP/swap.plan.log"; fail "the $BUDGET MiB plan swaps nothing"; }
train swap "$TMP/swap.pb"
check_memory swap "$BUDGET"
same_losses swap
grep -q "memory plan: swapped [1-9]" "$TMP/swap/logs/rank_0.log" || fail "stage 0 swapped nothing"

plan recompute --budget-mb "$RBUDGET" --set memory.swap=false
grep -qE "^  stage .* recompute( |$)" "$TMP/recompute.plan.log" || fail "the recompute-only plan recomputes nothing"
! grep -qE "^  stage .* swap$" "$TMP/recompute.plan.log" || fail "memory.swap=false, yet the plan swaps"
train recompute "$TMP/recompute.pb"
check_memory recompute "$RBUDGET"
same_losses recompute

# Swap directories that cannot work, with the swapping plan.
bad_dir() {  # bad_dir NAME DIR TEXT
  expect_failure "$1" "$3" "$TMP/out_$1" -- timeout 120 "$SLUICE" train "$CFG" "${run[@]}" --set pipeline.plan="$TMP/swap.pb" \
    --set memory.swap_dir="$2" --set job.output_dir="$TMP/out_$1"
  grep -qF "$2" "$TMP/$1.log" || fail "$1: the message does not name $2"
}
bad_dir missing_dir /nonexistent/swap "does not exist"
bad_dir not_a_dir /etc/hostname "is not a directory"
bad_dir tmpfs_dir /dev/shm "is on tmpfs"

# Read-only and full: small ext2 file systems mounted in a private mount
# namespace (gone with it, also on failure).
command -v unshare >/dev/null && command -v mkfs.ext2 >/dev/null || fail "unshare and mkfs.ext2 are needed (setup installs them)"
dd if=/dev/zero of="$TMP/small.img" bs=1M count=4 status=none && mkfs.ext2 -q -F "$TMP/small.img" || fail "mkfs.ext2"
mkdir -p "$TMP/mnt"
expect_failure read_only "is not writable" "$TMP/out_ro" -- unshare -m sh -c \
  "mount -o loop,ro '$TMP/small.img' '$TMP/mnt' && exec timeout 120 '$SLUICE' train '$CFG' --set training.steps=10 --set model.dropout=0.1 \
   --set pipeline.plan='$TMP/swap.pb' --set memory.swap_dir='$TMP/mnt' --set job.output_dir='$TMP/out_ro'"
expect_failure disk_full "the disk is full" "$TMP/never" -- unshare -m sh -c \
  "mount -o loop '$TMP/small.img' '$TMP/mnt' && timeout 120 '$SLUICE' train '$CFG' --set training.steps=10 --set model.dropout=0.1 \
   --set pipeline.plan='$TMP/swap.pb' --set memory.swap_dir='$TMP/mnt' --set job.output_dir='$TMP/out_full'; \
   rc=\$?; ls -A '$TMP/mnt' | grep -v lost+found && echo 'swap files left behind'; exit \$rc"
! grep -q "swap files left behind" "$TMP/disk_full.log" || fail "disk_full: swap files left in the directory"
grep -q "$TMP/mnt" "$TMP/disk_full.log" || fail "disk_full: the message does not name the directory"
echo "ok: swap directory errors"

# Full recompute (every block, as Megatron's) with the attention fused (no
# dropout: attention dropout keeps it as written, core/AttentionFusion.h), at
# exactly the smallest budget the planner names for it, under
# memory.hard_limit (an allocation beyond the budget fails): the replayed
# fused attention's memory is the plan's (Note [captures become pins],
# memory/StageMemory.cpp; it ran out of memory at +4% before), and the losses
# equal keeping everything exactly.
drop=()
run=(--set training.steps=4 --set logging.interval=2)
cp "$(shared_profile quickstart)" "$TMP/prof.pb"
full=(--set memory.policy=full_recompute)
FBUDGET=$(smallest_budget "${full[@]}")
[ -n "$FBUDGET" ] || fail "full_recompute: partition does not name the smallest budget that fits"
plan fused_keep
train fused_keep "$TMP/fused_keep.pb"
plan fused_recompute --budget-mb "$FBUDGET" "${full[@]}"
grep -qE "^  stage .* aten::scaled_dot_product_attention .* recompute" "$TMP/fused_recompute.plan.log" ||
  { cat "$TMP/fused_recompute.plan.log"; fail "full_recompute: no fused attention is recomputed"; }
train fused_recompute "$TMP/fused_recompute.pb" "${full[@]}" --set memory.budget_mb="$FBUDGET" --set memory.hard_limit=true
check_memory fused_recompute "$FBUDGET"
same_losses fused_recompute fused_keep
echo "ok: full recompute with fused attention trained at the $FBUDGET MiB it names, under memory.hard_limit"
