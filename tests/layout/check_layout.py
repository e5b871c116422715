#!/usr/bin/env python3
"""The code's shape, checked against docs/architecture.md.

1. Includes: every `#include "folder/..."` in a source folder follows the
   dependency table in docs/architecture.md ("## Folders and dependencies":
   one row per CMake target, `| `unit` | files | may include |`); every
   source folder is in the table (SOURCE_FOLDERS lists them, so a new folder
   without a row fails); and the table is a hierarchy: each row may include
   only rows above it, so no include cycle and no upward include can exist.
2. Sizes: no source file over MAX_FILE_LINES lines, no function over
   MAX_FUNCTION_LINES lines (counted by lizard, a C++-aware code analyser
   from PyPI that scripts/setup.sh installs).

3. Notes: every `Note [Title]` the sources (and CMakeLists.txt files) name
   has a row in docs/architecture.md's "## Notes index", and the file that
   row names mentions that Note; a row no code names is stale.

4. Tests' ranks: a gtest takes the MPI world from test::world() and declares
   its rank counts (tests/Ranks.h), so tests/ calls Communicator::world()
   only in TestMain.cpp and Ranks.cpp, and no test skips for want of ranks.

5. One CUDA seam (core/CudaRuntime.h): no source tests SLUICE_CUDA in the
   preprocessor (`#if SLUICE_CUDA`, `#ifdef`, `defined(SLUICE_CUDA)`), and
   CUDA headers (`#include` of c10/cuda/, ATen/cuda/, cuda_runtime*, cuda.h,
   nccl.h) appear only in CUDA-only files: the .cpp files a CMakeLists.txt
   of a source folder adds inside an `if(SLUICE_CUDA)` branch (read from
   those files, up to its `else()`/`endif()`), and the headers that only
   CUDA-only files include (and at least one does; e.g. core/NcclChannel.h),
   found by following includes until nothing changes.

Otherwise tests (tests/) and benches are not checked. Run: check_layout.py SOURCE_DIR.
Exit 0 when the code matches, 1 with one line per finding otherwise.
"""
import os
import re
import sys

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60

# Known exceptions to the limits (none today). The check fails for a new
# offender, and for an entry here that is no longer over, so the list only
# shrinks.
KNOWN_LONG_FILES = set()
KNOWN_LONG_FUNCTIONS = set()

SOURCE_FOLDERS = ["core", "memory", "optim", "pipeline", "partition", "models", "data", "config", "launch", "telemetry",
                  "checkpoint", "train", "cli"]


def architecture_section(source, title):
    """The text of docs/architecture.md's `## title` section (None when there is none), and the file's path."""
    path = os.path.join(source, "docs", "architecture.md")
    with open(path) as f:
        text = f.read()
    section = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.S | re.M)
    return (section.group(1) if section else None), path


def read_table(source):
    """unit -> (file patterns, allowed units), from docs/architecture.md."""
    section, path = architecture_section(source, "Folders and dependencies")
    if section is None:
        sys.exit(f"{path}: no '## Folders and dependencies' section")
    units = {}
    for line in section.splitlines():
        m = re.match(r"^\| `([a-z_]+)` \|(.*?)\|(.*?)\|", line)
        if not m:
            continue
        name, files, deps = m.groups()
        patterns = re.findall(r"`([^`]+)`", files)
        allowed = set(re.findall(r"`([a-z_]+)`", deps))
        units[name] = (patterns, allowed)
    if not units:
        sys.exit(f"{path}: the dependency table has no rows")
    return units


def check_table(units, findings):
    """Each unit may include only units listed above it: rows in dependency order, no cycle."""
    seen = []
    for name, (_, allowed) in units.items():
        for dep in sorted(allowed):
            if dep not in units:
                findings.append(f"docs/architecture.md: {name} may include {dep}, which has no row")
            elif dep not in seen:
                findings.append(f"docs/architecture.md: {name} may include {dep}, a unit below it in the table "
                                f"(an upward include, or a cycle)")
        seen.append(name)
    for folder in SOURCE_FOLDERS:
        if not any(p == folder + "/" or p.startswith(folder + "/") for pats, _ in units.values() for p in pats):
            findings.append(f"{folder}/: a source folder with no row in docs/architecture.md's dependency table")


def unit_of(units, rel):
    """The unit a file belongs to: the most specific pattern that matches."""
    best, best_len = None, -1
    for name, (patterns, _) in units.items():
        for p in patterns:
            if rel.startswith(p) and len(p) > best_len:
                best, best_len = name, len(p)
    return best


def sources(source):
    for folder in SOURCE_FOLDERS:
        for root, _, files in os.walk(os.path.join(source, folder)):
            for f in sorted(files):
                if f.endswith((".h", ".cpp", ".cu")):
                    yield os.path.relpath(os.path.join(root, f), source)


def check_includes(source, units, findings):
    include = re.compile(r'^\s*#\s*include\s+"([a-z_]+/[^"]+)"')
    for rel in sources(source):
        own = unit_of(units, rel)
        if own is None:
            findings.append(f"{rel}: in no unit of docs/architecture.md's dependency table")
            continue
        with open(os.path.join(source, rel)) as f:
            for n, line in enumerate(f, 1):
                m = include.match(line)
                if not m or not os.path.exists(os.path.join(source, m.group(1))):
                    continue  # system or generated headers (proto/*.pb.h are in the build tree)
                target = unit_of(units, m.group(1))
                if target is None or target == own:
                    continue
                if target not in units[own][1]:
                    findings.append(f"{rel}:{n}: {own} includes {m.group(1)} ({target}), "
                                    f"which docs/architecture.md does not let it depend on")


def check_sizes(source, findings):
    try:
        import lizard
    except ImportError:
        findings.append("lizard is not installed: run scripts/setup.sh (it installs lizard into the torch environment)")
        return
    long_files, long_functions = set(), set()
    for rel in sources(source):
        path = os.path.join(source, rel)
        with open(path) as f:
            lines = sum(1 for _ in f)
        if lines > MAX_FILE_LINES:
            long_files.add(rel)
            if rel not in KNOWN_LONG_FILES:
                findings.append(f"{rel}: {lines} lines (at most {MAX_FILE_LINES})")
        for fn in lizard.analyze_file(path).function_list:
            if fn.length > MAX_FUNCTION_LINES:
                key = f"{rel}:{fn.name}"
                long_functions.add(key)
                if key not in KNOWN_LONG_FUNCTIONS:
                    findings.append(f"{rel}:{fn.start_line}: {fn.name} is {fn.length} lines "
                                    f"(at most {MAX_FUNCTION_LINES})")
    for rel in sorted(KNOWN_LONG_FILES - long_files):
        findings.append(f"{rel} is no longer over {MAX_FILE_LINES} lines: remove it from KNOWN_LONG_FILES")
    for key in sorted(KNOWN_LONG_FUNCTIONS - long_functions):
        findings.append(f"{key} is no longer over {MAX_FUNCTION_LINES} lines: remove it from KNOWN_LONG_FUNCTIONS")


def check_notes(source, findings):
    section, path = architecture_section(source, "Notes index")
    if section is None:
        findings.append(f"{path}: no '## Notes index' section")
        return
    index = {}
    for line in section.splitlines():
        m = re.match(r"^\| (.+?) \| (\S+) \|$", line)
        if m and m.group(1) not in ("Note", "---"):
            index[m.group(1)] = m.group(2)
    note = re.compile(r"Note \[([^\]]+)\]")
    named = {}  # title -> files that name it
    files = list(sources(source))
    for root, _, names in os.walk(source):
        if os.path.relpath(root, source).split(os.sep)[0] in ("build", "tests", "bench", ".git"):
            continue
        files += [os.path.relpath(os.path.join(root, n), source) for n in names if n == "CMakeLists.txt"]
    for rel in files:
        with open(os.path.join(source, rel)) as f:
            for title in note.findall(f.read()):
                title = " ".join(re.sub(r"(//|#)", " ", title).split())  # a title broken over comment lines
                named.setdefault(title, set()).add(rel)
    for title in sorted(named):
        if title not in index:
            findings.append(f"Note [{title}] (named in {', '.join(sorted(named[title]))}) has no row in "
                            f"docs/architecture.md's Notes index")
        elif index[title] not in named[title]:
            findings.append(f"docs/architecture.md's Notes index puts Note [{title}] in {index[title]}, which does "
                            f"not name it (it is in {', '.join(sorted(named[title]))})")
    for title in sorted(set(index) - set(named)):
        findings.append(f"docs/architecture.md's Notes index lists Note [{title}], which no source names")


def check_test_ranks(source, findings):
    world = re.compile(r"Communicator::world\(\)")
    skip = re.compile(r"size\(\)\s*<\s*\d+\)\s*GTEST_SKIP")
    allowed = {os.path.join("tests", "TestMain.cpp"), os.path.join("tests", "Ranks.cpp")}
    for root, _, files in os.walk(os.path.join(source, "tests")):
        for f in sorted(files):
            if not f.endswith((".h", ".cpp")):
                continue
            rel = os.path.relpath(os.path.join(root, f), source)
            with open(os.path.join(source, rel)) as fh:
                for n, line in enumerate(fh, 1):
                    if world.search(line) and rel not in allowed:
                        findings.append(f"{rel}:{n}: a test takes the world from test::world() and declares its "
                                        f"rank counts (tests/Ranks.h), not Communicator::world()")
                    if skip.search(line):
                        findings.append(f"{rel}:{n}: a test declares its rank counts (tests/Ranks.h) "
                                        f"instead of skipping for want of ranks")


CUDA_IF = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif)\b.*\bSLUICE_CUDA\b")
CUDA_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](c10/cuda/|ATen/cuda/|cuda_runtime|cuda\.h|nccl\.h)')


def cuda_only_sources(source):
    """The .cpp/.cu files the source folders' CMakeLists.txt compile only under SLUICE_CUDA."""
    found = set()
    for folder in SOURCE_FOLDERS:
        path = os.path.join(source, folder, "CMakeLists.txt")
        if not os.path.exists(path):
            continue
        depth, inside = 0, None  # inside: the depth of the if(SLUICE_CUDA) branch being read
        with open(path) as f:
            for line in f:
                code = line.split("#", 1)[0]
                command = re.match(r"\s*(if|elseif|else|endif)\s*\((.*)", code)
                word = command.group(1) if command else None
                if word == "if":
                    depth += 1
                    if inside is None and re.match(r"\s*SLUICE_CUDA\s*(\)|AND\b)", command.group(2)):
                        inside = depth
                elif word in ("elseif", "else", "endif"):
                    if inside == depth:
                        inside = None
                    if word == "endif":
                        depth -= 1
                elif inside is not None:
                    found.update(os.path.join(folder, f) for f in re.findall(r"[\w/.-]+\.(?:cpp|cu)\b", code))
    return found


def check_cuda_seam(source, findings):
    """Rule 5: no #if SLUICE_CUDA; CUDA headers only in CUDA-only files."""
    includes, cuda_includes = {}, {}  # file -> the source files it includes; file -> its first CUDA include
    for rel in sources(source):
        includes[rel] = set()
        with open(os.path.join(source, rel)) as f:
            for n, line in enumerate(f, 1):
                if CUDA_IF.match(line):
                    findings.append(f"{rel}:{n}: tests SLUICE_CUDA; CUDA-only code goes behind the CUDA seam "
                                    f"(core/CudaRuntime.h), in files CMake compiles under if(SLUICE_CUDA)")
                if CUDA_INCLUDE.match(line):
                    cuda_includes.setdefault(rel, (n, line.strip()))
                m = re.match(r'^\s*#\s*include\s+"([a-z_]+/[^"]+)"', line)
                if m:
                    includes[rel].add(m.group(1))
    cuda_only = {rel for rel in cuda_only_sources(source) if rel in includes}
    changed = True
    while changed:  # a header is CUDA-only when CUDA-only files, and only they, include it
        changed = False
        for header in includes:
            users = {rel for rel, inc in includes.items() if header in inc}
            if header not in cuda_only and header.endswith(".h") and users and users <= cuda_only:
                cuda_only.add(header)
                changed = True
    for rel in sorted(set(cuda_includes) - cuda_only):
        n, text = cuda_includes[rel]
        findings.append(f"{rel}:{n}: {text}: a CUDA header outside the CUDA-only files (those CMake compiles "
                        f"under if(SLUICE_CUDA), and the headers only they include); ask core/CudaRuntime.h")


def main():
    source = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    units = read_table(source)
    findings = []
    check_table(units, findings)
    check_includes(source, units, findings)
    check_sizes(source, findings)
    check_notes(source, findings)
    check_test_ranks(source, findings)
    check_cuda_seam(source, findings)
    for f in findings:
        print(f)
    print(f"layout: {len(findings)} finding(s); units: {', '.join(sorted(units))}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
