#!/usr/bin/env bash
# The device run of gdn_layer.py: fla 0.4.0 from carried wheels (.whl); the compile phase in 16 processes side by
# side, each compiling every 16th of fla's autotune configurations and one shape's torch.compile graph (each stopped
# after COMPILE_S seconds), then the timed run alone on the GPU.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
cd benchmarks/gpu
start=$(date +%s)
for r in $(seq 0 15); do
  FLA_CACHE_RESULTS=0 TORCHINDUCTOR_COMPILE_THREADS=1 timeout "${COMPILE_S:-240}" python3 gdn_layer.py --compile "$r" 16 2>&1 | grep -v Warning | tail -2 &
done
wait
echo "# compile phase $(( $(date +%s) - start )) s"
python3 gdn_layer.py ${MODE:-}
echo "# total $(( $(date +%s) - start )) s"
