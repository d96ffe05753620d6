"""Functions that make numpy arrays of known sizes under the heap profiler.

    python heap_numpy.py SCALE OUTDIR RATE NUMPY

NUMPY is 1 for HeapProfiler(numpy=True), 0 for the default (numpy's data
not counted). The profile starts before numpy is imported, as it does in a
program that starts it first thing.

- churn_arrays: 8 KiB arrays, each dropped as the next is made: 1 GB x
  SCALE of array data;
- keep_arrays: 64 KiB arrays kept alive, 50 MB at a time, then released,
  ROUNDS x SCALE rounds (at least 8), a snapshot of the profile taken while each round's arrays
  are alive;
- thread_arrays: 16 KiB arrays made and dropped in a thread started after
  the profile: 1 GB x SCALE;
- grow: an array grown in place by ndarray.resize (numpy reallocates its
  data) from 8 KiB to 1 MiB in 127 steps, 16 x SCALE times (at least once);
  the last one is kept to the end: in-use is its final size.

(At the default rate, 1 GB is about 2,000 samples: a 2% spread.)

The truth is each array's sys.getsizeof: the object and the data it owns.
Writes OUTDIR/keep-N.pb.gz, OUTDIR/final.pb.gz, and prints the truth and
the profile's statistics as JSON.
"""

import itertools
import json
import os
import sys
import threading

import samprof

MB = 1 << 20
ROUNDS = 16


def churn_arrays(np, times):
    for _ in itertools.repeat(None, times):
        a = np.empty(1024)
        del a


def keep_arrays(np, store, idx):
    for i in idx:
        store[i] = np.ones(8192)


def release(store, idx):
    for i in idx:
        store[i] = None


def thread_arrays(np, times):
    for _ in itertools.repeat(None, times):
        a = np.zeros(2048)
        del a


def grow(np, steps):
    a = np.zeros(1024)
    for n in steps:
        a.resize(n, refcheck=False)
    return a


def handler_name():
    try:
        from numpy._core.multiarray import get_handler_name
    except ImportError:  # numpy 1.x
        from numpy.core.multiarray import get_handler_name
    return get_handler_name()


def main():
    scale = float(sys.argv[1])
    out = sys.argv[2]
    rate = int(sys.argv[3])
    prof = samprof.HeapProfiler(rate=rate, numpy=sys.argv[4] == "1")
    prof.start()
    import numpy as np

    small = sys.getsizeof(np.empty(1024))
    big = sys.getsizeof(np.ones(8192))
    mid = sys.getsizeof(np.zeros(2048))
    churn_times = int(1024 * MB * scale / small)
    n_keep = int(50 * MB / big)
    store = [None] * n_keep
    idx = list(range(n_keep))
    thread_times = int(1024 * MB * scale / mid)
    steps = [1024 * k for k in range(2, 129)]
    grows = max(1, int(16 * scale))

    churn_arrays(np, churn_times)
    rounds = max(8, int(ROUNDS * scale))
    for r in range(rounds):
        keep_arrays(np, store, idx)
        with open(os.path.join(out, f"keep-{r}.pb.gz"), "wb") as f:
            f.write(prof.snapshot())
        release(store, idx)
    t = threading.Thread(target=thread_arrays, args=(np, thread_times))
    t.start()
    t.join()
    for _ in range(grows):
        grown = grow(np, steps)
    with open(os.path.join(out, "final.pb.gz"), "wb") as f:
        f.write(prof.stop(kind="allocs"))
    stats = prof.stats
    print(
        json.dumps(
            {
                "rounds": rounds,
                "churn_arrays": {"space": churn_times * small, "objects": churn_times},
                "keep_arrays": {
                    "space": rounds * n_keep * big,
                    "inuse": n_keep * big,
                },
                "thread_arrays": {"space": thread_times * mid},
                "grow": {"inuse": grown.nbytes, "space": grows * 8 * (1024 + sum(steps))},
                "handler_after": handler_name(),
                "sampled": stats.sampled,
                "untracked": stats.untracked,
                "numpy": stats.numpy,
                "no_gil": stats.dropped["numpy_no_gil"],
            }
        )
    )


if __name__ == "__main__":
    main()
