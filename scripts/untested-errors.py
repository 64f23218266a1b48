#!/usr/bin/env python3
"""Lists the user-facing diagnostics of lib/, runtime/ and tools/ whose text
no test matches.

A diagnostic is a call of Status::error, emitError, emitOpError,
reportError, fail, std::runtime_error, the C API's errorStatus or a
compiler MessageSink (with what it streams, up to the
end of its statement). Its key is the longest run of string literals in it
(adjacent literals joined, escapes decoded); calls whose literals are all
shorter than MIN_KEY characters forward a message made elsewhere and are
not counted. A diagnostic is tested when its key, or its first PREFIX
characters, occur verbatim in a file under test/, unittests/ or
runtime/unittests/ (in C++ tests, adjacent literals joined). Distinct keys
are counted once.

Diagnostics of GPU_ONLY files and CUDA kernel files (.cu), whose error
paths only a GPU reaches, are listed apart and not held to --max on a
machine without one.

  scripts/untested-errors.py             # the counts, then each untested one
  scripts/untested-errors.py --max 5     # exit 1 if more than 5% are untested
"""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = ["lib", "runtime", "tools"]
SKIPPED = {os.path.join("runtime", "unittests"), os.path.join("runtime", "fuzz")}
TESTS = ["test", "unittests", os.path.join("runtime", "unittests")]
GPU_ONLY = {os.path.join("runtime", "cuda", name) for name in
            ["CudaBackend.cpp", "CublasLt.cpp", "CudaMatmul.cpp",
             "CudnnAttention.cpp", "FusedElementwiseKernels.cpp",
             "NcclCommunicator.cpp"]}
CALL = re.compile(
    r"\b(Status::error|emitError|emitOpError|reportError|fail|runtime_error|"
    r"errorStatus|sink)\s*\(")
MIN_KEY = 12
PREFIX = 30


def statement_at(text, start):
    """The text from `start` (a call) to the end of its statement, with
    what it streams: the first ';' at parenthesis depth 0 outside string
    and character literals (or the ')' closing an enclosing call)."""
    depth, i, n = 0, start, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            quote, i = c, i + 1
            while i < n and text[i] != quote:
                i += 2 if text[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                return text[start:i]
        elif c == ";" and depth == 0:
            return text[start:i]
        i += 1
    return text[start:]


LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')
ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "'": "'"}


def decode(body):
    return re.sub(r"\\(.)", lambda m: ESCAPES.get(m.group(1), m.group(1)), body)


def key_of(statement):
    """The longest run of adjacent string literals, decoded; of a
    llvm::formatv text, its longest piece between {N} placeholders."""
    key = max(literal_runs(statement), key=len)
    if re.search(r"\{\d+(:[^}]*)?\}", key):
        key = max(re.split(r"\{\d+(?::[^}]*)?\}", key), key=len)
    return key


def diagnostics():
    """(key, path, line) of every counted call site."""
    found = []
    for top in SOURCES:
        for directory, _, names in os.walk(os.path.join(ROOT, top)):
            relative = os.path.relpath(directory, ROOT)
            if any(relative == s or relative.startswith(s + os.sep) for s in SKIPPED):
                continue
            for name in sorted(names):
                if not name.endswith((".cpp", ".h", ".cu", ".cuh")):
                    continue
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for match in CALL.finditer(text):
                    key = key_of(statement_at(text, match.start()))
                    if len(key.strip()) >= MIN_KEY:
                        line = text.count("\n", 0, match.start()) + 1
                        found.append((key, os.path.relpath(path, ROOT), line))
    return found


def literal_runs(text):
    """A C++ file's string literals, adjacent ones joined, escapes decoded:
    what its expectations compare messages with."""
    runs, current, last_end = [], "", None
    for match in LITERAL.finditer(text):
        if last_end is not None and text[last_end:match.start()].strip():
            runs.append(current)
            current = ""
        current += decode(match.group(1))
        last_end = match.end()
    runs.append(current)
    return runs


def test_corpus():
    parts = []
    for top in TESTS:
        for directory, _, names in os.walk(os.path.join(ROOT, top)):
            for name in names:
                try:
                    with open(os.path.join(directory, name), encoding="utf-8") as f:
                        text = f.read()
                except (UnicodeDecodeError, OSError):
                    continue
                parts.append(text)
                if name.endswith((".cpp", ".h")):
                    parts.extend(literal_runs(text))
    return "\n".join(parts)


def tested(key, corpus):
    """Whether a test matches the key, or its first PREFIX characters (tests
    often check how a message begins)."""
    return key in corpus or (len(key) > PREFIX and key[:PREFIX] in corpus)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=float, default=None,
                        help="fail when more than this percentage is untested")
    args = parser.parse_args()
    corpus = test_corpus()
    sites = {}
    for key, path, line in diagnostics():
        sites.setdefault(key, []).append(f"{path}:{line}")
    def gpu_only(place):
        path = place.rsplit(":", 1)[0]
        return path in GPU_ONLY or path.endswith((".cu", ".cuh"))
    gpu = {key for key, places in sites.items()
           if all(gpu_only(place) for place in places)}
    untested = sorted((places[0], key) for key, places in sites.items()
                      if key not in gpu and not tested(key, corpus))
    untested_gpu = sorted((places[0], key) for key, places in sites.items()
                          if key in gpu and not tested(key, corpus))
    total = len(sites) - len(gpu)
    share = 100.0 * len(untested) / total if total else 0.0
    print(f"{total} distinct diagnostics, {total - len(untested)} tested, "
          f"{len(untested)} untested ({share:.1f}%)")
    for place, key in untested:
        print(f"  {place}: {key!r}")
    print(f"{len(gpu)} more in code only a GPU reaches, {len(untested_gpu)} "
          f"untested here:")
    for place, key in untested_gpu:
        print(f"  {place}: {key!r}")
    sys.stdout.flush()
    if args.max is not None and share > args.max:
        sys.exit(f"untested-errors: {share:.1f}% untested, more than {args.max}%")


if __name__ == "__main__":
    main()
