# Sourced by bench/extract.sh and bench/pack.sh: their shared settings (BIN, RUNS, the tree's
# LARGE, MEDIUM, SMALL, SMALL_MIN_KIB, SMALL_MAX_KIB and NAME) and the snapshot-like tree, built once under WORK
# by bench/extract_tree.py, or SOURCE_TREE as it is. Sets TREE, and TREE_BUILT=1 when the tree was
# (re)built this time.
BIN=$(realpath "${CACHELESS:-target/release/cacheless}")
RUNS=${RUNS:-5}
LARGE=${LARGE:-16}
MEDIUM=${MEDIUM:-4000}
SMALL=${SMALL:-20000}
SMALL_MIN_KIB=${SMALL_MIN_KIB:-1}
SMALL_MAX_KIB=${SMALL_MAX_KIB:-40}
NAME=${NAME:-snap-${LARGE}-${MEDIUM}-${SMALL}}
EXTRA=${EXTRA:-}
[ "$(id -u)" = 0 ] || { echo "needs root for drop_caches" >&2; exit 2; }
mkdir -p "$WORK"
TREE=$WORK/tree-$NAME
TREE_BUILT=0
if [ -n "${SOURCE_TREE:-}" ]; then
    # A tree nobody here wrote (e.g. an unpacked source tree), taken as it is.
    TREE=$(realpath "$SOURCE_TREE")
elif [ ! -f "$TREE.done" ]; then
    rm -rf "$TREE"
    python3 bench/extract_tree.py "$TREE" "$LARGE" "$MEDIUM" "$SMALL" "$SMALL_MAX_KIB" "$SMALL_MIN_KIB"
    touch "$TREE.done"
    TREE_BUILT=1
fi
