#!/usr/bin/env bash
# bench/precision: training.precision fp32 vs bf16 on the same cores: the
# quickstart GPT (4 x 192, block 128, global batch 16) on 2 stages x 1 thread
# under 1F1B, each precision planned once from its own profile (the bf16
# graph has autocast's casts and bfloat16 saved tensors), then ROUNDS rounds
# of both in alternating order (fp32 first in odd rounds). Prints per precision
# the median step time, the median over rounds of the paired ratio to fp32,
# each stage's measured peak (max over steps, metrics.jsonl) and its ratio to
# fp32's, the loss after the last step, and the CPU's bf16 instructions
# (without avx512_bf16 / amx_bf16 the bfloat16 matrix products are converted
# to float32 and are not faster). Asserts nothing.
#   usage: bench/precision.sh [ROUNDS] [STEPS]   (default 5 rounds of 15 steps; medians after 3 warm-up steps)
source "$(dirname "$0")/lib.sh"  # strict mode, $root, scripts/env.sh, $sluice
rounds=${1:-5}
steps=${2:-15}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
shape=(--set pipeline.stages=2 --set pipeline.schedule=1f1b --set pipeline.microbatches=4
       --set training.micro_batch_size=4 --set training.global_batch_size=16 --set job.threads_per_rank=1)
echo "bench/precision: quickstart GPT (4 x 192, block 128), 2 stages x 1 thread, 1F1B, m=4, $rounds rounds of $steps steps"
"$sluice" --version | sed 's/^/  /'
echo "  cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; bf16 instructions:" \
  "$(grep -m1 -o -w 'avx512_bf16\|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ' || true)" | sed 's/: *$/: none/'
for p in fp32 bf16; do
  "$sluice" profile "$root/configs/quickstart.yaml" -o "$tmp/profile_$p.pb" "${shape[@]}" --set training.precision=$p \
    >"$tmp/profile_$p.log" 2>&1 || { cat "$tmp/profile_$p.log" >&2; exit 1; }
  "$sluice" partition "$root/configs/quickstart.yaml" --profile "$tmp/profile_$p.pb" -o "$tmp/plan_$p.pb" "${shape[@]}" \
    --set training.precision=$p >"$tmp/plan_$p.log" 2>&1 || { cat "$tmp/plan_$p.log" >&2; exit 1; }
done
losses_last() { jfields loss "$1" | tail -1 | awk '{print $2}'; }
run() {  # precision round -> "step_time peak_stage0 peak_stage1 last_loss"
  local out="$tmp/run_$1_$2"
  "$sluice" train "$root/configs/quickstart.yaml" "${shape[@]}" --set training.precision="$1" \
    --set pipeline.plan="$tmp/plan_$1.pb" --set training.steps="$steps" --set logging.interval="$steps" \
    --set optimizer.schedule=constant --set optimizer.warmup_steps=0 --set job.output_dir="$out" \
    >"$out.log" 2>&1 || { cat "$out.log" >&2; exit 1; }
  local peaks
  peaks=$(grep -o '"peak_bytes": *\[[^]]*\]' "$out/metrics.jsonl" | tr '[],' '   ' | awk '
    { for (i = 2; i <= NF; ++i) if ($i > m[i]) m[i] = $i } END { print m[2], m[3] }')
  echo "$(median_step_time "$out/metrics.jsonl") $peaks $(losses_last "$out/metrics.jsonl")"
}
results="$tmp/results"
: >"$results"
for r in $(seq 1 "$rounds"); do
  order="fp32 bf16"
  [ $((r % 2)) -eq 0 ] && order="bf16 fp32"
  for p in $order; do echo "$r $p $(run $p $r)" >>"$results"; done
  echo "  round $r/$rounds done" >&2
done
awk -v rounds="$rounds" '
  function median(a, n,   i, j, t) { for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
                                      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  { t[$2, $1] = $3; p0[$2] = $4 > p0[$2] ? $4 : p0[$2]; p1[$2] = $5 > p1[$2] ? $5 : p1[$2]; loss[$2] = $6 }
  END {
    printf "\n%-10s %12s %14s %16s %16s %12s\n", "precision", "step time s", "vs fp32", "stage 0 peak", "stage 1 peak", "last loss"
    for (k = 0; k < 2; ++k) {
      p = k ? "bf16" : "fp32"
      for (r = 1; r <= rounds; ++r) { s[r] = t[p, r]; q[r] = t[p, r] / t["fp32", r] }
      ms = median(s, rounds); mq = median(q, rounds)
      printf "%-10s %12.4f %13.3fx %10.2f MiB %5.2fx %8.2f MiB %5.2fx %10s\n", p, ms, mq, p0[p] / 1048576, p0[p] / p0["fp32"],
             p1[p] / 1048576, p1[p] / p1["fp32"], loss[p]
    }
    print "\nvs fp32: the step time over fp32 in the same round, median over rounds; peaks: the model'"'"'s peak of allocated"
    print "bytes per stage (counting allocator), max over steps and rounds; last loss: after the last step (one run)"
  }' "$results"
