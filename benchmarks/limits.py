"""This CPU's limits for a quantized model: memory bandwidth (numpy copies) and the int8 dot-product peak of the
kernels llama.cpp runs (VNNI, 512- and 256-bit maddubs), per core; and what a token of the bundled model costs.
Bandwidth: bytes read plus written by `numpy.copyto` of 512 MiB on 1 and on every core (a thread each), best of
`--runs`; the int8 peak: a C loop of multiply-adds (the system's cc), 2 ops each, every accumulator in a register.
    python benchmarks/limits.py [--runs 5] [--model local|local:NAME] [--json PATH]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import common

KERNELS = r"""
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
/* vpdpbusd zmm: 64 int8 multiply-adds per instruction; twelve accumulators in registers hide its latency. */
#define ALL12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define ZERO(k) __m512i c##k = _mm512_setzero_si512();
#define DP(k) c##k = _mm512_dpbusd_epi32(c##k, a, b);
#define KEEP(k) __asm__ volatile("" : "+v"(c##k));
#define SUM(k) s = _mm512_add_epi32(s, c##k);
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double vnni(long n) {
    __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(2), s = _mm512_setzero_si512();
    ALL12(ZERO)
    double t = now();
    for (long i = 0; i < n; i++) { ALL12(DP) ALL12(KEEP) }
    t = now() - t;
    ALL12(SUM)
    volatile int sink = _mm512_reduce_add_epi32(s); (void)sink;
    return n * 12.0 * 64 * 2 / t;
}
/* What ggml's AVX2 int8 dot products do: vpmaddubsw, vpmaddwd by ones, vpaddd, 32 multiply-adds a round. */
#define ALL8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define ZERO2(k) __m256i d##k = _mm256_setzero_si256();
#define B2(k) __m256i b##k = _mm256_set1_epi8(2 + k);
#define MA(k) d##k = _mm256_add_epi32(d##k, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b##k), one));
#define KEEP2(k) __asm__ volatile("" : "+x"(d##k));
__attribute__((target("avx2"))) static double avx2(long n) {
    __m256i a = _mm256_set1_epi8(1), one = _mm256_set1_epi16(1);
    ALL8(ZERO2) ALL8(B2)
    double t = now();
    for (long i = 0; i < n; i++) { __asm__ volatile("" : "+x"(a)); ALL8(MA) ALL8(KEEP2) }
    t = now() - t;
    return n * 8.0 * 32 * 2 / t;
}
/* What the zen4 variant's Q4_K GEMM (q4_K_8x8, the repacked tensors) does: the same three on zmm, 64 a round. */
#define ZERO5(k) __m512i e##k = _mm512_setzero_si512();
#define B5(k) __m512i f##k = _mm512_set1_epi8(2 + k);
#define MA5(k) e##k = _mm512_add_epi32(e##k, _mm512_madd_epi16(_mm512_maddubs_epi16(a, f##k), one));
#define KEEP5(k) __asm__ volatile("" : "+v"(e##k));
__attribute__((target("avx512f,avx512bw"))) static double avx512bw(long n) {
    __m512i a = _mm512_set1_epi8(1), one = _mm512_set1_epi16(1);
    ALL8(ZERO5) ALL8(B5)
    double t = now();
    for (long i = 0; i < n; i++) { __asm__ volatile("" : "+v"(a)); ALL8(MA5) ALL8(KEEP5) }
    t = now() - t;
    return n * 8.0 * 64 * 2 / t;
}
int main(int argc, char **argv) {
    long n = atol(argv[2]);
    printf("%.4g\n", argv[1][0] == 'v' ? vnni(n) : argv[1][0] == 'b' ? avx512bw(n) : avx2(n));
    return 0;
}
"""
KERNEL_NAMES = {"vnni": "avx512_vnni", "bw": "avx512bw_maddubs", "avx2": "avx2"}
"""The loop's argument -> its name in the JSON and the table."""
ROUNDS = 100_000_000
"""Loop rounds per kernel measurement: 0.2-1 s on one core."""


def bandwidth(threads: int, runs: int, size: int = 512 * 2**20) -> float:
    """Best bytes per second over `runs` of `threads` simultaneous copies of `size` bytes each (read + write)."""
    import numpy as np

    pairs = [(np.ones(size, dtype=np.uint8), np.empty(size, dtype=np.uint8)) for _ in range(threads)]
    best = 0.0
    for _ in range(runs + 1):  # the first round touches the pages
        gate = threading.Barrier(threads + 1)
        workers = [threading.Thread(target=lambda s=s, d=d, g=gate: (g.wait(), np.copyto(d, s))) for s, d in pairs]
        for worker in workers:
            worker.start()
        gate.wait()
        started = time.perf_counter()
        for worker in workers:
            worker.join()
        best = max(best, 2 * size * threads / (time.perf_counter() - started))
    return best


def int8_peaks(runs: int) -> dict[str, float | None]:
    """Best int8 ops per second of one core, per kernel; None where no C compiler or the CPU lacks it."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        return {name: None for name in KERNEL_NAMES.values()}
    with tempfile.TemporaryDirectory() as folder:
        source, binary = Path(folder, "kernels.c"), Path(folder, "kernels")
        source.write_text(KERNELS, encoding="utf-8")
        found: dict[str, float | None] = {name: None for name in KERNEL_NAMES.values()}
        if subprocess.run([compiler, "-O2", "-o", str(binary), str(source)], capture_output=True).returncode != 0:
            return found  # not an x86-64 compiler
        for kernel in KERNEL_NAMES:
            best: float | None = None
            for _ in range(runs):
                done = subprocess.run([str(binary), kernel, str(ROUNDS)], capture_output=True, text=True)
                if done.returncode != 0:  # SIGILL: this CPU does not run it
                    break
                best = max(best or 0.0, float(done.stdout))
            found[KERNEL_NAMES[kernel]] = best
        return found


def model_costs(name: str) -> dict[str, Any]:
    """The bundled model `name`: its parameters and the bytes of its weight tensors (llama.cpp's counts), which
    generation reads once per token (Qwen2.5's output layer is its token embeddings, so all of them)."""
    from llama_cpp import Llama

    from shared_tools.models.llama_server import load_cpu_backend
    from shared_tools.models.local import find_weights

    load_cpu_backend()
    weights = find_weights(name)
    llm = Llama(model_path=str(weights), n_ctx=64, n_threads=1, verbose=False)
    return {"weights": weights.name, "parameters": llm._model.n_params(), "bytes": llm._model.size()}


def main(argv: list[str] | None = None) -> int:
    parser = common.parser(__doc__.splitlines()[0], default_runs=5, runs_help="measurements per limit, the best kept")
    parser.add_argument("--model", default="local", help="'local' or 'local:<name>' (default local)")
    parser.add_argument("--mib", type=int, default=512, help="MiB copied per core (default 512)")
    args = parser.parse_args(argv)
    console = common.console()
    name = args.model.partition(":")[2]
    if not name:
        from shared_tools.models.local import default_model

        name = default_model()
    cores = len(os.sched_getaffinity(0))
    found: dict[str, Any] = {"machine": common.machine(), "cores": cores}
    found["bandwidth_gb_s"] = {str(n): bandwidth(n, args.runs, args.mib * 2**20) / 1e9 for n in sorted({1, cores})}
    found["int8_gops_per_core"] = {k: v / 1e9 if v else None for k, v in int8_peaks(args.runs).items()}
    rows = [[f"memory bandwidth, {n} core(s)", f"{v:.1f} GB/s"] for n, v in found["bandwidth_gb_s"].items()]
    rows += [
        [f"int8 peak, {kernel}, 1 core", f"{v:.0f} GOP/s" if v else "not run here"]
        for kernel, v in found["int8_gops_per_core"].items()
    ]
    found["model"] = model = model_costs(name)
    flops = 2 * model["parameters"]
    rows += [
        [f"{name}: parameters, weight bytes", f"{model['parameters']:,}, {model['bytes']:,}"],
        ["2 ops a parameter per token: GOP per token", f"{flops / 1e9:.2f}"],
    ]
    for kernel, peak in found["int8_gops_per_core"].items():
        if peak:
            rows.append([f"prompt tokens/s limit, {kernel}, {cores} core(s)", f"{peak * 1e9 * cores / flops:.0f}"])
    for n, gb_s in found["bandwidth_gb_s"].items():
        rows.append([f"generated tokens/s limit, {n} core(s)' bandwidth", f"{gb_s * 1e9 / model['bytes']:.1f}"])
    console.print(common.table("This CPU's limits", ["limit", "measured"], rows))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    console.print(common.machine_line(found["machine"]) + f" · load at the end {load}")
    common.write_json(args.json, found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
