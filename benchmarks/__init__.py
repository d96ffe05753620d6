"""Benchmarks: samprof's overhead, accuracy and memory against other Python
profilers.

Run ``python -m benchmarks`` from the repository root (``--help`` for the
options); docs/benchmarks.md holds the figures of the last full run and says
how they were taken. Modules:

- ``workloads``: the programs profiled, each measuring its own CPU per call
  group;
- ``profilers``: the profilers compared and how each runs a workload;
- ``child``: one measurement, in a fresh subprocess;
- ``runner``: runs the subprocesses and pairs profiled with unprofiled runs;
- ``web``, ``webapps``: the web middleware's cost per request, on small
  applications under real servers;
- ``environment``: the benchmark virtual environment and the peers in it;
- ``report``: figures, docs/benchmarks.md and the plot.
"""
