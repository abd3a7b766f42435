# SPDX-License-Identifier: Apache-2.0
"""What the benchmarks that compare cuscope with RMM and CCCL share: the peers' headers, fetched
from PyPI with pip into a cache, and the machine's description for the results files.

  RMM 25.04: librmm-cu12 25.4.0 (the last release whose C++ library is header-only) and the
             compiled rapids-logger it needs, rapids-logger 0.1.19.
  CCCL 3.5:  nvidia-cuda-cccl 13.3.5.0.6 (the one scripts/toolchains.sh pins), taken from
             scripts/toolchains.sh's cache when it is there.

Offline, each install_* function returns a reason instead of a directory, for the caller to skip
with a message. Used by host_cost.py (beside this file) and ../compile_cost.py (--peers).
"""
import glob
import os
import platform
import re
import subprocess
import sys
import zipfile

RMM_WHEELS = ["librmm-cu12==25.4.0", "rapids-logger==0.1.19"]
CCCL35_WHEEL = "nvidia-cuda-cccl==13.3.5.0.6"  # the one scripts/toolchains.sh pins
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "cuscope", "peers")


def log(text):
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def pip_fetch(requirements, dest):
    """Downloads the wheels into dest and unpacks them into dest/unpacked; None, or a reason."""
    os.makedirs(dest, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d",
           dest] + requirements
    log("peers: downloading: " + " ".join(cmd))
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "pip download failed: %s" % e
    if proc.returncode != 0:
        lines = proc.stdout.strip().splitlines()
        return "pip download failed (offline?): " + (lines[-1] if lines else "no output")
    for wheel in glob.glob(os.path.join(dest, "*.whl")):
        with zipfile.ZipFile(wheel) as z:
            z.extractall(os.path.join(dest, "unpacked"))
    return None


def find_rmm(directory):
    """(rmm include dir, rapids_logger include dir, rapids_logger lib dir) under an unpacked
    librmm-cu12 + rapids-logger, or None."""
    inc = glob.glob(os.path.join(directory, "**", "include", "rmm", "device_buffer.hpp"),
                    recursive=True)
    logger = glob.glob(os.path.join(directory, "**", "include", "rapids_logger", "logger.hpp"),
                       recursive=True)
    lib = glob.glob(os.path.join(directory, "**", "librapids_logger.so"), recursive=True)
    if not (inc and logger and lib):
        return None
    up = lambda p, n: os.path.abspath(os.path.join(p, *([".."] * n)))
    return up(inc[0], 2), up(logger[0], 2), os.path.dirname(os.path.abspath(lib[0]))


def install_rmm(cache, download=True):
    """Downloads and unpacks the RMM wheels into cache (unless they are there already, or not
    download); returns (find_rmm's answer, None) or (None, a reason)."""
    found = find_rmm(cache)
    if found:
        return found, None
    if not download:
        return None, "RMM is not in %s and downloads are off" % cache
    reason = pip_fetch(RMM_WHEELS, cache)
    if reason:
        return None, reason
    found = find_rmm(cache)
    if not found:
        return None, "the downloaded wheels hold no rmm/device_buffer.hpp or librapids_logger.so"
    return found, None


def find_cccl(directory):
    """The directory that holds cuda/, cub/ and thrust/ of a CCCL under directory, or None."""
    for h in sorted(glob.glob(os.path.join(directory, "**", "cuda", "std", "__cccl",
                                           "version.h"), recursive=True)):
        return os.path.abspath(os.path.join(os.path.dirname(h), "..", "..", ".."))
    return None


def install_cccl35(cache, download=True):
    """CCCL 3.5's include directory: scripts/toolchains.sh's unpacked wheel when it is there,
    else downloaded into cache (unless not download). Returns (directory, None) or (None,
    reason)."""
    name, version = CCCL35_WHEEL.split("==")
    toolchains = os.environ.get("CUSCOPE_TOOLCHAINS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "cuscope", "toolchains")
    for d in (os.path.join(toolchains, "unpacked", "%s-%s" % (name, version)),
              os.path.join(cache, "cccl35")):
        found = find_cccl(d) if os.path.isdir(d) else None
        if found:
            return found, None
    if not download:
        return None, "CCCL 3.5 is in neither cache and downloads are off"
    reason = pip_fetch([CCCL35_WHEEL], os.path.join(cache, "cccl35"))
    if reason:
        return None, reason
    found = find_cccl(os.path.join(cache, "cccl35"))
    return (found, None) if found else (None, "the downloaded wheel holds no CCCL headers")


def cccl_version(cccl):
    """"3.0.1" from CCCL's version header, or "unknown"."""
    try:
        with open(os.path.join(cccl, "cuda", "std", "__cccl", "version.h")) as f:
            m = re.search(r"#define CCCL_VERSION (\d+)", f.read())
        v = int(m.group(1))
        return "%d.%d.%d" % (v // 1000000, v // 1000 % 1000, v % 1000)
    except (OSError, AttributeError):
        return "unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def scrub_paths(value, replacements):
    """value (a string, or lists and dicts of them) with each absolute path that replacements
    names (longest first) written as its stand-in, so that results files name no path of the
    machine that wrote them."""
    if isinstance(value, str):
        for path, stand_in in replacements:
            value = value.replace(path, stand_in)
        return value
    if isinstance(value, list):
        return [scrub_paths(v, replacements) for v in value]
    if isinstance(value, dict):
        return {k: scrub_paths(v, replacements) for k, v in value.items()}
    return value
