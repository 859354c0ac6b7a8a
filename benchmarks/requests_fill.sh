# usage: bash .req/fill.sh SECONDS
M=/root/Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf
[ -f $M ] || cat /root/parts/qwen.part* > $M
sha256sum $M
export PYTHONPATH=/root/site:$PWD
export LD_PRELOAD=/lib/x86_64-linux-gnu/libstdc++.so.6  # the image's python needs it for this build (segfault at load otherwise)
for i in $(seq 0 15); do
  timeout $1 python3 benchmarks/requests.py fill /root/test.jsonl --model $M --shard $i/16 --out /root/shards/s$i.sqlite > /root/shards/s$i.log 2>&1 &
done
wait
python3 - <<'PY'
import glob, os
from ltrr.generation.cache import GenerationCache
out = os.environ["OUT"] + "/fill.sqlite"
with GenerationCache(out) as c:
    for f in sorted(glob.glob("/root/shards/s*.sqlite")):
        print(f, c.merge(f))
    print("rows", len(c))
PY
head -2 /root/shards/s0.log; tail -1 /root/shards/s*.log | grep -c requests; grep -h -o "\"requests\": [0-9]*, \"generator_calls\": [0-9]*" /root/shards/*.log | head -3
