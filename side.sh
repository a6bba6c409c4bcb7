#!/bin/bash
# scratch: side by side of token_variants=64/128/192 on the device's CPU cores (delete after)
mkdir -p /tmp/site && tar -xJf .whl/site-*.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/python_packages:$PWD PYTHONUNBUFFERED=1 NVFP4_NVIDIA_EXAMPLE=$PWD/.nvex/dense_blockscaled_gemm_persistent.py
python3 - <<'PY'
s = open("submission.py").read()
old = "    return config if widest > TOKEN_CHUNK and wide_load < busiest(narrow)[0] else narrow\n"
assert s.count(old) == 1
open("/tmp/forced.py", "w").write(s.replace(old, "    return config\n"))
PY
mkdir -p /tmp/cells
cells="1:shipped:submission.py 1:token_variants=64/128/192:submission.py 2:shipped:submission.py 2:token_variants=64/128/192:/tmp/forced.py 3:token_variants=64/128/192:/tmp/forced.py"
echo $cells | tr ' ' '\n' | xargs -P 6 -I{} bash -c 'IFS=: read b c f <<< "{}"; n=$(echo "$b-$c-$(basename $f)" | tr "/=," "+-_"); python3 tools/emulate.py benchmarks --timing-only --only $b --calls 4 --config "$c" --submission $f > /tmp/cells/$n.txt 2>&1'
for f in /tmp/cells/*.txt; do echo "== $(basename $f)"; grep -E "^benchmark|^geomean" $f | cut -c1-400; tail -n 2 $f | grep -i "error\|Traceback" ; done > $OUT/side.txt
cat $OUT/side.txt
