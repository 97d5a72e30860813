#!/usr/bin/env bash
# The device run of gdn_chunk.py: fla 0.4.0 from carried wheels (.whl), the compile phase one process per distinct
# (H, D) and half of its configurations side by side (16 processes) (each stopped after COMPILE_S seconds), then the timed run alone on the GPU.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
cd benchmarks/gpu
start=$(date +%s)
for hd in "96 128" "16 128" "64 128" "8 64" "32 256" "32 128" "8 128" "2 128"; do
  for r in 0 1; do
    FLA_CACHE_RESULTS=0 timeout "${COMPILE_S:-300}" python3 gdn_chunk.py --compile $hd $r 2 2>&1 | grep -v Warning &
  done
done
wait
echo "# compile phase $(( $(date +%s) - start )) s"
python3 gdn_chunk.py
echo "# total $(( $(date +%s) - start )) s"
