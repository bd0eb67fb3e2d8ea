"""Benchmarks of the reference allocator (``python -m benchmarks.run [--quick]``).

bench_warm_path      caching malloc+free vs the floor of its SortedList operations
bench_replay         replay throughput on the real traces in ../shared/traces
bench_fragmentation  peak reserved / peak allocated per policy (traces + a generated workload)
bench_gpu            cudaMalloc vs reference-in-CuPy vs CuPy MemoryPool vs cudaMallocAsync (GPU only)

Each writes ``benchmarks/results/<name>.json`` with the machine description.
"""
