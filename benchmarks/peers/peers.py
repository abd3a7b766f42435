#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""cuscope against its peers, in the same run: PyTorch's caching allocator and CuPy's pools.

Two measurements, each run by cuscope's own benchmark executables (loop_bench, session_bench, with
--json) and by the peers in this process, interleaved in passes (the order rotates each pass) so
that drift affects all alike:

  loop   the per-iteration loop of loop_bench: allocate a temporary (64 MiB by default), fill it
         (a kernel or memset over all of it), free it, synchronize the stream. Per iteration time.
           cuscope       loop_bench's 'session' figure (a session per batch on a keep_all pool)
           torch         torch.empty + fill_ + del + stream synchronize (caching allocator)
           torch + empty_cache   the same with torch.cuda.empty_cache() every iteration
           cupy pool     cupy.empty + fill + del + synchronize on a cupy.cuda.MemoryPool
           cupy async    the same on a cupy.cuda.MemoryAsyncPool (cudaMallocAsync, current pool)
  exit   "memory returned after the work": N GiB allocated in 256 MiB chunks and filled, the GPU
         waited for, the chunks freed; then, timed, the end of the work:
           cuscope       session_bench's 'session' figure (session::finish())
           torch         torch.cuda.synchronize() + torch.cuda.empty_cache()
           cupy pool     MemoryPool.free_all_blocks()
           cupy async    MemoryAsyncPool.free_all_blocks()
         with the bytes returned against the bytes expected (the allocator's own statistics:
         memory_reserved / total_bytes; and the cudaMemGetInfo difference), and the cost of
         allocating again afterwards (first chunk and everything, cold and warm).

A peer that is not installed (or sees no GPU) is skipped with a message; the JSON says why.
Writes JSON in the benchmarks' layout (benchmark "peers") with --json.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
GiB = 1 << 30


def parse_size(text):
    text = text.strip().upper().rstrip("B").rstrip("I")
    scale = {"K": 1 << 10, "M": MiB, "G": GiB}.get(text[-1:], 1)
    return int(text[:-1] if scale != 1 else text) * scale


def fmt_bytes(n):
    for unit, s in (("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if n >= s:
            v = n / float(s)
            return ("%.0f %s" if v == int(v) else "%.2f %s") % (v, unit)
    return "%d B" % n


def fmt_ns(ns):
    if ns is None:
        return "-"
    if ns < 1e4:
        return "%.0f ns" % ns
    if ns < 1e7:
        return "%.1f us" % (ns / 1e3)
    return "%.1f ms" % (ns / 1e6)


def median(values):
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    m = len(v) // 2
    return v[m] if len(v) % 2 else (v[m - 1] + v[m]) / 2.0


def spread_pct(values):
    v = sorted(x for x in values if x is not None)
    if len(v) < 2:
        return 0.0
    q = lambda f: v[int(round(f * (len(v) - 1)))]
    med = median(v)
    return (q(0.75) - q(0.25)) / med * 100 if med else 0.0


def ratio(a, b):
    return a / b if a is not None and b else None


def chunks_of(total, chunk):
    out, done = [], 0
    while done < total:
        out.append(min(chunk, total - done))
        done += chunk
    return out


# Peers ------------------------------------------------------------------------------------------

class Peer(object):
    """One allocator of a framework, with the loop and the exit measurements."""
    name = ""
    label = ""

    def activate(self):
        """Makes this allocator the one the framework uses."""

    def loop(self, nbytes, iterations):
        """Nanoseconds per iteration; checks the last value written."""
        self.activate()
        self.sync_all()
        start = time.perf_counter()
        last = None
        for i in range(iterations):
            x = self.empty(nbytes)
            self.fill(x, i & 0xFF)
            if i == iterations - 1:
                last = self.last_byte(x)
            del x
            self.after_free_in_loop()
            self.stream_sync()
        ns = (time.perf_counter() - start) * 1e9 / iterations
        if last != (iterations - 1) & 0xFF:
            raise RuntimeError("%s loop self-check: read %r, expected %d"
                               % (self.name, last, (iterations - 1) & 0xFF))
        return ns

    def exit(self, total, chunk):
        chunks = chunks_of(total, chunk)
        self.activate()
        self.release_all()
        entry = self.reserved()
        held = []
        for i, c in enumerate(chunks):
            held.append(self.empty(c))
            self.fill(held[-1], i & 0x7F)
        if self.last_byte(held[-1]) != (len(chunks) - 1) & 0x7F:
            raise RuntimeError("%s exit self-check failed" % self.name)
        self.sync_all()
        del held[:]
        reserved_before = self.reserved()
        free_before = self.device_free()
        start = time.perf_counter()
        self.end_of_work()
        exit_ns = (time.perf_counter() - start) * 1e9
        free_after = self.device_free()
        reserved_after = self.reserved()
        expected = reserved_before - entry
        r = {"exit_ns": exit_ns, "expected_bytes": expected,
             "pool_returned_bytes": reserved_before - reserved_after,
             "driver_returned_bytes": free_after - free_before}
        r["pool_returned_fraction"] = ratio(r["pool_returned_bytes"], expected)
        r["driver_returned_fraction"] = ratio(r["driver_returned_bytes"], expected)
        r["first_chunk_cold_ns"] = self.allocate_timed(chunks[:1], release_after=False)
        r["first_chunk_warm_ns"] = self.allocate_timed(chunks[:1], release_after=True)
        r["all_cold_ns"] = self.allocate_timed(chunks, release_after=False)
        r["all_warm_ns"] = self.allocate_timed(chunks, release_after=True)
        return r

    def allocate_timed(self, chunks, release_after):
        self.sync_all()
        start = time.perf_counter()
        held = [self.empty(c) for c in chunks]
        self.sync_all()
        ns = (time.perf_counter() - start) * 1e9
        del held[:]
        self.sync_all()
        if release_after:
            self.release_all()
        return ns

    def after_free_in_loop(self):
        pass


class TorchPeer(Peer):
    def __init__(self, torch, empty_cache_each):
        self.torch = torch
        self.empty_cache_each = empty_cache_each
        self.name = "torch_empty_cache_each" if empty_cache_each else "torch"
        self.label = ("PyTorch, empty_cache() every iteration" if empty_cache_each
                      else "PyTorch caching allocator")

    def empty(self, n):
        return self.torch.empty(n, dtype=self.torch.uint8, device="cuda")

    def fill(self, x, v):
        x.fill_(v)

    def last_byte(self, x):
        return int(x[-1].item())

    def stream_sync(self):
        self.torch.cuda.current_stream().synchronize()

    def sync_all(self):
        self.torch.cuda.synchronize()

    def after_free_in_loop(self):
        if self.empty_cache_each:
            self.torch.cuda.empty_cache()

    def reserved(self):
        return self.torch.cuda.memory_reserved()

    def device_free(self):
        return self.torch.cuda.mem_get_info()[0]

    def end_of_work(self):
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()

    def release_all(self):
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()


class CupyPeer(Peer):
    def __init__(self, cupy, asynchronous):
        self.cp = cupy
        self.asynchronous = asynchronous
        self.name = "cupy_async" if asynchronous else "cupy_pool"
        self.label = "CuPy MemoryAsyncPool" if asynchronous else "CuPy MemoryPool"
        self.pool = cupy.cuda.MemoryAsyncPool() if asynchronous else cupy.cuda.MemoryPool()

    def activate(self):
        self.cp.cuda.set_allocator(self.pool.malloc)

    def empty(self, n):
        return self.cp.empty(n, dtype=self.cp.uint8)

    def fill(self, x, v):
        x.fill(v)

    def last_byte(self, x):
        return int(x[-1].item())

    def stream_sync(self):
        self.cp.cuda.get_current_stream().synchronize()

    def sync_all(self):
        self.cp.cuda.runtime.deviceSynchronize()

    def reserved(self):
        return self.pool.total_bytes()

    def device_free(self):
        return self.cp.cuda.runtime.memGetInfo()[0]

    def end_of_work(self):
        # MemoryPool frees its cached blocks (cudaFree synchronizes); MemoryAsyncPool synchronizes
        # and trims the pool.
        self.pool.free_all_blocks()

    def release_all(self):
        self.sync_all()
        self.pool.free_all_blocks()


def load_peers(selected):
    """The peers that can run here, and a reason for each that cannot."""
    peers, skipped, versions = [], {}, {}
    if "torch" in selected:
        try:
            import torch
            if not torch.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is False")
            versions["torch"] = "%s (CUDA %s)" % (torch.__version__, torch.version.cuda)
            versions["PYTORCH_CUDA_ALLOC_CONF"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
            peers += [TorchPeer(torch, False), TorchPeer(torch, True)]
        except Exception as e:  # ImportError, or no usable GPU
            skipped["torch"] = "%s: %s" % (type(e).__name__, e)
            print("SKIPPED peer torch: %s" % skipped["torch"])
    if "cupy" in selected:
        try:
            import cupy
            if cupy.cuda.runtime.getDeviceCount() < 1:
                raise RuntimeError("no CUDA device")
            versions["cupy"] = "%s (runtime %d)" % (cupy.__version__,
                                                    cupy.cuda.runtime.runtimeGetVersion())
            peers.append(CupyPeer(cupy, False))
            try:
                peers.append(CupyPeer(cupy, True))
            except Exception as e:
                skipped["cupy_async"] = "%s: %s" % (type(e).__name__, e)
                print("SKIPPED peer cupy_async: %s" % skipped["cupy_async"])
        except Exception as e:
            skipped["cupy"] = "%s: %s" % (type(e).__name__, e)
            print("SKIPPED peer cupy: %s" % skipped["cupy"])
    return peers, skipped, versions


def release_peers(peers):
    """Hands every peer's cached memory back before cuscope's process runs."""
    for p in peers:
        try:
            p.release_all()
        except Exception:
            pass


# cuscope's side -------------------------------------------------------------------------------

def run_ours(cmd, work, tag):
    path = os.path.join(work, "%s.json" % tag)
    full = cmd + ["--json", path]
    proc = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout)
        raise RuntimeError("%s failed with exit code %d" % (" ".join(full), proc.returncode))
    with open(path) as f:
        return json.load(f)


def find_row(doc, nbytes):
    for r in doc.get("results", []):
        if r.get("bytes") == nbytes:
            return r
    raise RuntimeError("%s wrote no row for %d bytes" % (doc.get("benchmark"), nbytes))


# The run ---------------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loop-bench", required=True, help="cuscope's loop_bench executable")
    p.add_argument("--session-bench", required=True, help="cuscope's session_bench executable")
    p.add_argument("--loop-size", default=None, help="temporary size (default 64M)")
    p.add_argument("--iterations", type=int, default=None, help="loop iterations per pass")
    p.add_argument("--exit-sizes", default=None, help="work sizes for the exit (default 1G,4G,16G)")
    p.add_argument("--chunk", default=None, help="chunk size for the exit (default 256M)")
    p.add_argument("--passes", type=int, default=None, help="interleaved passes (median over them)")
    p.add_argument("--peers", default="torch,cupy", help="peers to run: torch,cupy")
    p.add_argument("--quick", action="store_true", help="tiny sizes and counts (a smoke run)")
    p.add_argument("--json", help="write the results to this file")
    a = p.parse_args()
    q = a.quick
    loop_size = parse_size(a.loop_size or ("4M" if q else "64M"))
    iterations = a.iterations or (5 if q else 50)
    exit_sizes = [parse_size(s) for s in (a.exit_sizes or ("16M" if q else "1G,4G,16G")).split(",")]
    chunk = parse_size(a.chunk or ("4M" if q else "256M"))
    loop_passes = a.passes or (2 if q else 7)
    exit_passes = a.passes or (2 if q else 3)
    selected = [s.strip() for s in a.peers.split(",") if s.strip()]

    peers, skipped, versions = load_peers(selected)
    loop = {"cuscope": [], "cuscope_default_t0": [], "cuscope_raw_pool": []}
    for peer in peers:
        loop[peer.name] = []
    exits = {}
    failures = []
    simulated = False
    device_name = None
    ours_loop_cmd = [a.loop_bench, "--sizes", str(loop_size), "--iterations", str(iterations),
                     "--rounds", "1"]
    ours_exit_cmd = [a.session_bench, "--sizes", ",".join(str(s) for s in exit_sizes),
                     "--chunk", str(chunk), "--rounds", "1"]

    with tempfile.TemporaryDirectory(prefix="cuscope-peers-") as work:
        # Warm-up: each peer's first allocation and kernel, outside the figures.
        for peer in list(peers):
            try:
                peer.loop(min(loop_size, 1 << 20), 2)
            except Exception as e:
                skipped[peer.name] = "warm-up failed: %s: %s" % (type(e).__name__, e)
                print("SKIPPED peer %s: %s" % (peer.name, skipped[peer.name]))
                peers.remove(peer)
        contenders = ["cuscope"] + [peer.name for peer in peers]
        by_name = dict((peer.name, peer) for peer in peers)

        for n in range(loop_passes):
            for i in range(len(contenders)):
                who = contenders[(i + n) % len(contenders)]
                try:
                    if who == "cuscope":
                        release_peers(peers)
                        doc = run_ours(ours_loop_cmd, work, "loop%d" % n)
                        simulated = simulated or bool(doc.get("simulated"))
                        device_name = doc.get("device", {}).get("name")
                        alts = find_row(doc, loop_size)["alternatives"]
                        loop["cuscope"].append(alts["session"]["median"])
                        loop["cuscope_default_t0"].append(alts["default_pool_t0"]["median"])
                        loop["cuscope_raw_pool"].append(alts["raw_pool"]["median"])
                    else:
                        loop[who].append(by_name[who].loop(loop_size, iterations))
                except Exception as e:
                    failures.append("loop pass %d, %s: %s: %s" % (n, who, type(e).__name__, e))
                    print("FAILED: " + failures[-1])

        exit_contenders = ["cuscope"] + [peer.name for peer in peers
                                         if not peer.name.startswith("torch_empty")]
        for who in exit_contenders:
            exits[who] = dict((s, []) for s in exit_sizes)
        for n in range(exit_passes):
            for i in range(len(exit_contenders)):
                who = exit_contenders[(i + n) % len(exit_contenders)]
                try:
                    if who == "cuscope":
                        release_peers(peers)
                        doc = run_ours(ours_exit_cmd, work, "exit%d" % n)
                        for s in exit_sizes:
                            alt = find_row(doc, s)["alternatives"]["session"]
                            exits[who][s].append({
                                "exit_ns": alt["exit_ns"]["median"],
                                "expected_bytes": alt["expected_bytes_max"],
                                "pool_returned_fraction": alt["pool_returned_fraction"]["min"],
                                "driver_returned_fraction":
                                    alt["driver_returned_fraction"]["median"],
                                "first_chunk_cold_ns": alt["first_chunk_cold_ns"]["median"],
                                "first_chunk_warm_ns": alt["first_chunk_warm_ns"]["median"],
                                "all_cold_ns": alt["all_cold_ns"]["median"],
                                "all_warm_ns": alt["all_warm_ns"]["median"]})
                    else:
                        for s in exit_sizes:
                            exits[who][s].append(by_name[who].exit(s, chunk))
                except Exception as e:
                    failures.append("exit pass %d, %s: %s: %s" % (n, who, type(e).__name__, e))
                    print("FAILED: " + failures[-1])
        release_peers(peers)

    # Tables and figures.
    labels = {"cuscope": "cuscope session", "cuscope_default_t0": "default pool t0 (loop_bench)",
              "cuscope_raw_pool": "raw tuned pool (loop_bench)"}
    for peer in peers:
        labels[peer.name] = peer.label
    ours = median(loop["cuscope"])
    loop_rows, results = [], {"loop": {}, "exit": {}}
    for who, samples in loop.items():
        m = median(samples)
        results["loop"][who] = {"median_ns": m, "spread_pct": spread_pct(samples),
                                "samples_ns": samples, "ratio_to_cuscope": ratio(m, ours)}
        loop_rows.append([labels.get(who, who), "%s ±%.0f%%" % (fmt_ns(m), spread_pct(samples)),
                          "%.2fx" % ratio(m, ours) if ratio(m, ours) else "-"])
    exit_rows = []
    for who, by_size in exits.items():
        results["exit"][who] = {}
        for s, runs in by_size.items():
            if not runs:
                continue
            key = lambda k: median([r.get(k) for r in runs])
            row = dict((k, key(k)) for k in runs[0])
            row["pool_returned_fraction"] = min(r["pool_returned_fraction"] or 0 for r in runs)
            row["passes"] = len(runs)
            results["exit"][who][str(s)] = row
            exit_rows.append([fmt_bytes(s), labels.get(who, who), fmt_ns(row["exit_ns"]),
                              "%.2f%% of %s" % (100 * row["pool_returned_fraction"],
                                                fmt_bytes(int(row["expected_bytes"] or 0))),
                              "%.2f%%" % (100 * (row["driver_returned_fraction"] or 0)),
                              fmt_ns(row["first_chunk_cold_ns"]), fmt_ns(row["first_chunk_warm_ns"]),
                              fmt_ns(row["all_cold_ns"]), fmt_ns(row["all_warm_ns"])])
    tables = [
        {"title": "per-iteration loop, %s temporaries, %d iterations, median of %d passes "
                  "(ratio > 1: slower than cuscope)" % (fmt_bytes(loop_size), iterations,
                                                        loop_passes),
         "columns": ["allocator", "time per iteration", "ratio to cuscope"], "rows": loop_rows},
        {"title": "memory returned after the work (exit), median of %d passes" % exit_passes,
         "columns": ["size", "allocator", "exit time", "returned (allocator stats, worst)",
                     "returned (driver)", "1st chunk cold", "warm", "all cold", "all warm"],
         "rows": exit_rows},
    ]
    for t in tables:
        widths = [max([len(c)] + [len(r[i]) for r in t["rows"]]) for i, c in enumerate(t["columns"])]
        line = lambda cells: "  ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i])
                                       for i, c in enumerate(cells))
        print("\n" + t["title"])
        print(line(t["columns"]))
        print("-" * (sum(widths) + 2 * (len(widths) - 1)))
        for r in t["rows"]:
            print(line(r))

    headline = []
    size_label = fmt_bytes(loop_size)
    for peer in peers:
        m = results["loop"].get(peer.name, {}).get("median_ns")
        headline.append({"name": "peers: %s / cuscope session, per-iteration loop, %s"
                                 % (peer.label, size_label),
                         "value": ratio(m, ours), "unit": "x",
                         "detail": "above 1: cuscope is faster"})
    largest = str(exit_sizes[-1])
    ours_exit = results["exit"].get("cuscope", {}).get(largest, {})
    for who in exit_contenders[1:]:
        row = results["exit"].get(who, {}).get(largest)
        if not row:
            continue
        headline.append({"name": "peers: %s, memory returned after the work (allocator stats), %s"
                                 % (labels[who], fmt_bytes(exit_sizes[-1])),
                         "value": 100 * (row["pool_returned_fraction"] or 0), "unit": "%"})
        headline.append({"name": "peers: %s / cuscope session, exit time, %s"
                                 % (labels[who], fmt_bytes(exit_sizes[-1])),
                         "value": ratio(row["exit_ns"], ours_exit.get("exit_ns")), "unit": "x"})
    headline = [h for h in headline if h["value"] is not None]
    for h in headline:
        print("headline: %s: %.3g %s" % (h["name"], h["value"], h["unit"]))
    notes = ["cuscope's figures come from %s and %s run by this script between the peers' runs "
             "(one round each per pass), on the same GPU." % (os.path.basename(a.loop_bench),
                                                               os.path.basename(a.session_bench)),
             "The peers fill with their own kernels (fill_ / fill); loop_bench uses "
             "cudaMemsetAsync. Every iteration synchronizes the allocator's stream."]
    for name, why in sorted(skipped.items()):
        notes.append("Skipped %s: %s" % (name, why))
    for f in failures:
        notes.append("Failed: " + f)
    if simulated:
        notes.append("cuscope ran on the simulated device: its timings measure the simulation.")
    for n in notes:
        print("note: " + n)
    if a.json:
        doc = {"schema": "cuscope-bench/1", "benchmark": "peers", "simulated": simulated,
               "quick": q, "command_line": " ".join(sys.argv[1:]),
               "device": {"name": device_name, "simulated": simulated},
               "build": {"python": sys.version.split()[0], "peers": versions},
               "config": {"loop_bytes": loop_size, "iterations": iterations,
                          "exit_sizes": exit_sizes, "chunk_bytes": chunk,
                          "loop_passes": loop_passes, "exit_passes": exit_passes},
               "skipped": skipped, "failures": failures, "notes": notes, "tables": tables,
               "results": results, "headline": headline}
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print("wrote " + a.json)
    if not loop["cuscope"]:
        print("peers: cuscope's own benchmarks did not run; no ratio can be reported")
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
