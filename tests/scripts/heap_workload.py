"""Functions that allocate known amounts under the heap profiler.

    python heap_workload.py SCALE OUTDIR [RATE]

- churn: 1 KiB bytes objects (OBJ domain), each freed when the next one
  replaces it: 400 MB x SCALE allocated, almost none of it kept;
- keep: 64 KiB bytearrays (object and buffer, OBJ domain) kept alive,
  50 MB at a time, then released: ROUNDS rounds, a snapshot of the profile
  taken while each round's arrays are alive;
- containers: lists of 10,000 items and copies of a 1,000-key dict, whose
  item arrays and key tables come from the MEM domain (lists) and from
  whatever domain the version uses (dicts): 200 MB x SCALE allocated.

The loops allocate nothing else: indexes and containers are made beforehand
(ints above 256 are objects too), and itertools.repeat counts without ints.
The truth is each object's sys.getsizeof, which counts the object header
and its buffer (a list or dict object reused from CPython's free list makes
it too high by under 0.1%).

Writes OUTDIR/keep-N.pb.gz (the snapshots), OUTDIR/final.pb.gz, and prints
the truth as JSON.
"""

import itertools
import json
import os
import sys

import samprof

MB = 1 << 20
ROUNDS = 8


def churn(buf, idx, batches):
    for _ in itertools.repeat(None, batches):
        for i in idx:
            buf[i] = bytes(1024)


def keep(store, idx):
    for i in idx:
        store[i] = bytearray(65536)


def release(store, idx):
    for i in idx:
        store[i] = None


def containers(template, times):
    for _ in itertools.repeat(None, times):
        a = [None] * 10000
        d = template.copy()
        del a, d


def main():
    scale = float(sys.argv[1])
    out = sys.argv[2]
    rate = int(sys.argv[3]) if len(sys.argv) > 3 else samprof.HeapProfiler().rate
    bytes_size = sys.getsizeof(bytes(1024))
    array_size = sys.getsizeof(bytearray(65536))
    template = {f"key{i}": i for i in range(1000)}
    container_size = sys.getsizeof([None] * 10000) + sys.getsizeof(template.copy())

    batch = 1000
    batches = int(400 * MB * scale / bytes_size / batch)
    churn_buf = [None] * batch
    churn_idx = list(range(batch))
    n_arrays = int(50 * MB / array_size)
    store = [None] * n_arrays
    store_idx = list(range(n_arrays))
    times = int(200 * MB * scale / container_size)

    prof = samprof.HeapProfiler(rate=rate)
    prof.start()
    churn(churn_buf, churn_idx, batches)
    rounds = max(2, int(ROUNDS * scale))
    for r in range(rounds):
        keep(store, store_idx)
        with open(os.path.join(out, f"keep-{r}.pb.gz"), "wb") as f:
            f.write(prof.snapshot())
        release(store, store_idx)
    containers(template, times)
    with open(os.path.join(out, "final.pb.gz"), "wb") as f:
        f.write(prof.stop(kind="allocs"))
    stats = prof.stats
    print(
        json.dumps(
            {
                "rate": rate,
                "rounds": rounds,
                "churn": {"objects": batches * batch, "space": batches * batch * bytes_size},
                "keep": {
                    "objects": 2 * rounds * n_arrays,
                    "space": rounds * n_arrays * array_size,
                    "inuse": n_arrays * array_size,
                },
                "containers": {"space": times * container_size},
                "sampled": stats.sampled,
                "untracked": stats.untracked,
            }
        )
    )


if __name__ == "__main__":
    main()
