# shellcheck shell=bash
# Sourced by the benchmark drivers (bench/compare, bench/train_step/run.sh,
# bench/gpu_step/run.sh): other work on the machine just before a run.
# machine_load prints the 1-minute load average and the busy share of all
# cores over one second (load counts threads, so a many-threaded process
# inflates it; the busy share says what was really used).
machine_load() {
  local a b
  read -r -a a </proc/stat
  sleep 1
  read -r -a b </proc/stat
  awk -v l="$(cut -d' ' -f1 /proc/loadavg)" \
    -v busy=$(((b[1] - a[1]) + (b[2] - a[2]) + (b[3] - a[3]) + (b[6] - a[6]) + (b[7] - a[7]))) \
    -v idle=$(((b[4] - a[4]) + (b[5] - a[5]))) \
    'BEGIN{printf "%s %.2f\n", l, (busy+idle>0 ? busy/(busy+idle) : 0)}'
}
