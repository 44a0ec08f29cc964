#!/usr/bin/env bash
# One call on a lent GPU machine (no network; the tree arrives without .git): installs the
# carried wheels, then runs the named parts, each under its own time limit, writing logs and
# artifacts under $OUT/<part>/ so that whatever finished comes back even if a later part fails.
# Parts run in the order given; "a|b" runs two lanes in parallel on GPUs 0 and 1.
#
#   WARPGAUGE_GIT_COMMIT=<sha> WARPGAUGE_GIT_DIRTY=0 bash scripts/gpu_session.sh env full "|" gputests training
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?OUT must name the output folder}"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
site=/tmp/wg-site
if ls .whl/*.whl .peers/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl .peers/*.whl >/dev/null 2>&1 || echo "wheel install failed"
fi
export PYTHONPATH="$PWD/src:$site"
stamp() { date -u +%H:%M:%S; }

part() {  # part NAME GPU
  local name=$1 gpu=$2 dir="$OUT/$1"
  mkdir -p "$dir"
  echo "[$(stamp)] start $name on GPU $gpu"
  export CUDA_VISIBLE_DEVICES=$gpu
  case "$name" in
    env)
      { nvidia-smi; nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,TEMPERATURE; python3 -c \
        'import torch,triton;print(torch.__version__,triton.__version__,torch.cuda.get_device_name())'; } \
        >"$dir/env.log" 2>&1 ;;
    tests)
      timeout 420 python3 -m pytest -q -p no:logging -p no:cacheprovider tests \
        >"$dir/pytest.log" 2>&1; echo "exit $?" >>"$dir/pytest.log" ;;
    gputests)
      timeout 220 python3 -m pytest -q -p no:logging -p no:cacheprovider tests/gpu \
        >"$dir/pytest.log" 2>&1; echo "exit $?" >>"$dir/pytest.log" ;;
    plans)
      timeout 575 python3 -m warpgauge bench --mode plans --out "$dir" >"$dir/log" 2>&1
      echo "exit $?" >>"$dir/log" ;;
    cuda)
      timeout 200 python3 -m warpgauge.cuda_softmax --out "$dir/run" --runs 7 --sanitize \
        >"$dir/log" 2>&1; echo "exit $?" >>"$dir/log"; cp cuda/build/resources.txt "$dir/" 2>/dev/null ;;
    training)
      timeout 50 python3 examples/train_tiny.py --steps 120 --device cuda --dtype bfloat16 --out "$dir/train_tiny" >"$dir/train_tiny.log" 2>&1
      timeout 120 python3 -m warpgauge bench --mode host --out "$dir" >"$dir/host.log" 2>&1
      timeout 300 python3 -m warpgauge bench --mode accuracy --out "$dir" >"$dir/accuracy.log" 2>&1
      timeout 575 python3 -m warpgauge bench --mode fwd_bwd --out "$dir" >"$dir/fwd_bwd.log" 2>&1 ;;
    quick)
      timeout 300 python3 -m warpgauge bench --quick --out "$dir" >"$dir/log" 2>&1
      echo "exit $?" >>"$dir/log" ;;
    full)
      timeout 575 python3 -m warpgauge bench --max-minutes "${BENCH_MINUTES:-8.4}" --out "$dir" >"$dir/log" 2>&1
      echo "exit $?" >>"$dir/log" ;;
    *) echo "unknown part $name" ;;
  esac
  echo "[$(stamp)] end $name"
}

lane() {  # lane GPU PART...
  local gpu=$1; shift
  for p in "$@"; do part "$p" "$gpu"; done
}

left=() right=() side=left
for a in "$@"; do
  if [ "$a" = "|" ]; then side=right; elif [ $side = left ]; then left+=("$a"); else right+=("$a"); fi
done
if [ ${#right[@]} -gt 0 ]; then
  lane 0 "${left[@]}" &
  lane 1 "${right[@]}" &
  wait
else
  lane 0 "${left[@]}"
fi
# The tail of every log, for the caller's terminal.
find "$OUT" \( -name '*.log' -o -name log \) -print | sort | while read -r f; do
  echo "== ${f#"$OUT"/}"; grep -v '^DEBUG' "$f" | tail -n 6
done
# Pack everything into one archive (only 8 files come back).
tar -C "$OUT" -czf "$OUT/session.tar.gz" --exclude=session.tar.gz . 2>/dev/null
find "$OUT" -mindepth 1 -maxdepth 1 ! -name session.tar.gz -exec rm -rf {} +
ls -la "$OUT"
