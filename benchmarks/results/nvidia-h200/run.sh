#!/usr/bin/env bash
# The second GPU session of 2026-11-26 (NVIDIA H200), run from the repository root through the
# device tool (it sets $OUT): the cuda matrix with the project's own timeout (--dist load), then
# the launch overhead of the commit before the launch fast path (be8a463, carried as
# old_tree.tar.gz = `git archive be8a463 | gzip`) and of this tree, alternating, in one run.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1 ALPYKA_CACHE_DIR=/tmp/alpyka-cache
R=$OUT/r; mkdir -p $R
T0=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; free -g | sed -n 2p;
  python3 -c "import sys,torch,cupy,numba,numpy;print(sys.version.split()[0],'torch',torch.__version__,'cupy',cupy.__version__,'numba',numba.__version__,'numpy',numpy.__version__)"; } > $R/machine.txt 2>&1
( while true; do echo "$(date +%T) $(free -m | awk 'NR==2{print "host_used_MiB="$3" avail_MiB="$7}') gpu_used_MiB=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits) load=$(cut -d' ' -f1 /proc/loadavg)"; sleep 5; done ) > $R/memory.log 2>&1 &
MON=$!
timeout -s ABRT -k 10 330 python3 -m pytest -p portable.testing.plugin --backends cuda -n 8 --dist load -q -rfEs -p no:cacheprovider > $R/cuda_test_matrix.log 2>&1
echo "pytest rc=$? after $(( $(date +%s) - T0 )) s" >> $R/cuda_test_matrix.log
kill $MON
(dmesg -T 2>&1 | grep -v NVRM | tail -20) > $R/dmesg_after.txt
mkdir -p /tmp/old && tar -xzf old_tree.tar.gz -C /tmp/old
for i in 1 2; do
  (cd /tmp/old && ALPYKA_BACKENDS=cuda PYTHONPATH=/tmp/old timeout 60 python3 benchmarks/bench_backends.py --quick --no-progress --out $R/old$i > $R/old$i.log 2>&1)
  ALPYKA_BACKENDS=cuda timeout 60 python3 benchmarks/bench_backends.py --quick --no-progress --out $R/new$i > $R/new$i.log 2>&1
done
timeout 40 python3 benchmarks/results/nvidia-h200/launch_profile.py > $R/launch_profile.txt 2>&1
ALPYKA_BACKENDS=cuda,cpu_serial,cpu_threads timeout 60 python3 benchmarks/bench_clustering.py --quick --no-progress --out $R > $R/bench_clustering.log 2>&1
echo "end $(( $(date +%s) - T0 )) s" >> $R/machine.txt
tar -czf $OUT/results.tgz -C $OUT r && rm -rf $R
