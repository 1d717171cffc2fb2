#!/bin/bash
# Clone to the demo's run page: `git clone` of this checkout's branch into a fresh folder,
# `make demo` in a terminal (script(1) gives it a pty), timed until the page URL is
# printed; then the page is fetched, the demo stopped with Ctrl-C (SIGINT) and the folder
# removed. Usage: tests/bench/clone_to_page.sh [SOURCE] [BRANCH]   (SOURCE: a URL or path)
set -u
src=${1:-$(git -C "$(dirname "$0")" rev-parse --show-toplevel)}
branch=${2:-$(git -C "$src" rev-parse --abbrev-ref HEAD 2>/dev/null || echo main)}
port=${DEMO_PORT:-9479}
dir=$(mktemp -d /tmp/wtwin-clone-XXXXXX)
typescript=$dir.typescript
start=$(date +%s.%N)
git clone -q -b "$branch" "$src" "$dir/wtwin" && cd "$dir/wtwin" || exit 1
DEMO_PORT=$port script -qfec "make demo" "$typescript" > /dev/null 2>&1 &
pid=$!
until grep -q "runs/demo-degrading" "$typescript" 2>/dev/null; do
  kill -0 $pid 2>/dev/null || { echo "the demo exited without a page:"; tail -20 "$typescript"; exit 1; }
  sleep 0.5
done
end=$(date +%s.%N)
printf 'clone to page: %.0f s; load %s; %s\n' "$(echo "$end - $start" | bc)" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" "$(git rev-parse --short HEAD)"
curl -s -o /dev/null -w "GET /runs/demo-degrading: %{http_code}\n" "http://127.0.0.1:$port/runs/demo-degrading"
desc() { for c in $(pgrep -P "$1"); do echo "$c"; desc "$c"; done; }
for p in $(desc $pid); do   # the demo's own process, found under this script's `script`
  grep -q daemon_demo "/proc/$p/cmdline" 2>/dev/null && kill -INT "$p"
done
wait $pid
echo "make demo exit: $?"
rm -rf "$dir" "$typescript"
