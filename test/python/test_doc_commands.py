"""The commands of README.md and of the pages under docs/ run as written,
and the pages' relative links resolve.

The convention (docs/guide/README.md, "Commands on these pages are
tested"): a fenced block opened with ```sh runs; one opened with
```sh skip: REASON is reported as skipped with that reason; blocks in other
languages never run. A page's blocks run in order, each command alone in
bash, in a fresh directory per page that links the repository's top-level
entries (examples/, scripts/, docs/, README.md, ...), with the build's
bin/ ($TRELLIS_BIN's directory) and this Python's first on PATH. What a
command exports is seen by the commands after it on the same page."""

import dataclasses
import glob
import os
import re
import shlex
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

import pytest

from conftest import ROOT

# Seconds one command may take; the whole file stays within a few minutes.
COMMAND_TIMEOUT = 180
# Characters of a failing command's output shown.
OUTPUT_TAIL = 8000
# Repository entries not linked into a page's directory.
NOT_LINKED = {".git", "build"}
# Shell blocks in these languages would escape the test: write ```sh.
REFUSED_LANGUAGES = {"bash", "shell", "console", "shell-session", "zsh"}
# Variables that describe the shell itself, not what a command exported.
SHELL_VARIABLES = {"PWD", "OLDPWD", "SHLVL", "_"}

FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,})\s*(?P<info>.*)$")


def pages() -> List[str]:
    """README.md and every Markdown page under docs/, relative to ROOT."""
    found = ["README.md"]
    found += sorted(
        os.path.relpath(path, ROOT)
        for path in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"),
                              recursive=True))
    return found


@dataclasses.dataclass
class Block:
    """A fenced block: where it opens, its info string, its lines."""
    page: str
    line: int  # 1-based line of the opening fence
    language: str
    attributes: str  # the info string after the language
    lines: List[Tuple[int, str]]  # (1-based line, text) of the body

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def fenced_blocks(page: str) -> List[Block]:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read().splitlines()
    blocks: List[Block] = []
    open_block: Optional[Block] = None
    fence = ""
    for number, line in enumerate(text, start=1):
        if open_block is None:
            match = FENCE.match(line)
            if match:
                fence = match.group("fence")
                info = match.group("info").strip()
                language, _, attributes = info.partition(" ")
                open_block = Block(page, number, language, attributes.strip(),
                                   [])
        elif (line.strip().startswith(fence[0] * len(fence)) and
              line.strip().strip(fence[0]) == ""):
            blocks.append(open_block)
            open_block = None
        else:
            open_block.lines.append((number, line))
    assert open_block is None, f"{page}:{open_block.line}: unclosed fence"
    return blocks


def skip_reason(block: Block) -> Optional[str]:
    """None for a block that runs; the reason of a `sh skip: REASON` one."""
    if not block.attributes:
        return None
    match = re.fullmatch(r"skip:\s*(\S.*)", block.attributes)
    if not match:
        raise ValueError(
            f"{block.name}: expected ```sh or ```sh skip: REASON, found "
            f"```sh {block.attributes}")
    return match.group(1)


def commands(block: Block) -> List[Tuple[int, str]]:
    """The block's commands with the line each starts on: lines joined
    while a quote is open or a line ends in a backslash; comment lines and
    blank lines dropped."""
    result: List[Tuple[int, str]] = []
    current: List[str] = []
    start = 0
    for number, line in block.lines:
        if not current:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            start = number
        current.append(line)
        text = "\n".join(current)
        if text.rstrip().endswith("\\"):
            continue
        try:
            shlex.split(text, comments=True)
        except ValueError:  # a quote still open
            continue
        result.append((start, text))
        current = []
    if current:
        raise ValueError(f"{block.page}:{start}: unterminated command")
    return result


def shell_blocks() -> List[Block]:
    return [block for page in pages() for block in fenced_blocks(page)
            if block.language == "sh"]


BLOCKS = shell_blocks()


@dataclasses.dataclass
class PageRun:
    """A page's directory and environment, and how far its blocks ran."""
    directory: str
    env: Dict[str, str]
    ran: int = 0  # blocks of the page run so far, in order
    failed: Optional[str] = None  # the first failing block's name


RUNS: Dict[str, PageRun] = {}


def page_run(page: str, tmp_path_factory, trellis_bin: str) -> PageRun:
    if page not in RUNS:
        directory = str(tmp_path_factory.mktemp(
            re.sub(r"[^A-Za-z0-9]+", "-", page)))
        for entry in os.listdir(ROOT):
            if entry not in NOT_LINKED:
                os.symlink(os.path.join(ROOT, entry),
                           os.path.join(directory, entry))
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([
            os.path.dirname(os.path.abspath(trellis_bin)),
            os.path.dirname(sys.executable), env.get("PATH", "")
        ])
        RUNS[page] = PageRun(directory, env)
    return RUNS[page]


def run_command(run: PageRun, page: str, line: int, command: str) -> None:
    """Runs one command in the page's directory and environment; fails the
    test with the command and its output when it exits non-zero."""
    env_file = os.path.join(run.directory, ".doc-test-env")
    script = (f"set -o pipefail\n{command}\n__status=$?\n"
              f"env -0 > {shlex.quote(env_file)}\nexit $__status\n")
    started = time.monotonic()
    try:
        result = subprocess.run(["bash", "-c", script], cwd=run.directory,
                                env=run.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT,
                                timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or b"").decode(errors="replace")
        pytest.fail(f"{page}:{line}: timed out after {COMMAND_TIMEOUT} s\n"
                    f"$ {command}\n{output[-OUTPUT_TAIL:]}", pytrace=False)
    seconds = time.monotonic() - started
    output = result.stdout.decode(errors="replace")
    if result.returncode != 0:
        pytest.fail(f"{page}:{line}: exit status {result.returncode} after "
                    f"{seconds:.1f} s\n$ {command}\n{output[-OUTPUT_TAIL:]}",
                    pytrace=False)
    print(f"{page}:{line}: {seconds:.1f} s: {command.splitlines()[0]}")
    if os.path.exists(env_file):
        with open(env_file, "rb") as f:
            entries = f.read().split(b"\0")
        env = {}
        for entry in entries:
            name, _, value = entry.decode(errors="replace").partition("=")
            if name and name not in SHELL_VARIABLES:
                env[name] = value
        run.env = env


def run_block(run: PageRun, block: Block) -> None:
    if skip_reason(block) is None:
        for line, command in commands(block):
            run_command(run, block.page, line, command)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_commands_run(block: Block, tmp_path_factory,
                      trellis_bin: str) -> None:
    """Runs a block after the blocks of its page before it (run once)."""
    reason = skip_reason(block)
    page_blocks = [b for b in BLOCKS if b.page == block.page]
    index = page_blocks.index(block)
    run = page_run(block.page, tmp_path_factory, trellis_bin)
    if run.failed:
        pytest.skip(f"{run.failed}, earlier on {block.page}, failed")
    # A block selected alone still finds what the blocks before it wrote.
    while run.ran < index:
        earlier = page_blocks[run.ran]
        try:
            run_block(run, earlier)
        except BaseException:
            run.failed = earlier.name
            raise
        run.ran += 1
    if reason is not None:
        run.ran = index + 1
        pytest.skip(f"{block.name}: {reason}")
    try:
        run_block(run, block)
    except BaseException:
        run.failed = block.name
        raise
    run.ran = index + 1


@pytest.mark.parametrize("page", pages())
def test_shell_blocks_follow_the_convention(page: str) -> None:
    """Every shell block is ```sh or ```sh skip: REASON, and splits into
    whole commands."""
    for block in fenced_blocks(page):
        assert block.language not in REFUSED_LANGUAGES, (
            f"{block.name}: write ```sh (it runs) or ```sh skip: REASON, "
            f"not ```{block.language}")
        if block.language == "sh":
            skip_reason(block)
            commands(block)


def test_readme_has_one_python_example() -> None:
    """scripts/test.sh runs the README's first ```python block: there is
    exactly one."""
    blocks = [b for b in fenced_blocks("README.md") if b.language == "python"]
    assert len(blocks) == 1, [b.name for b in blocks]


def heading_anchors(path: str) -> set:
    """The anchors GitHub gives a page's headings."""
    anchors, counts = set(), {}
    in_fence = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line.rstrip("\n")):
                in_fence = not in_fence
                continue
            match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if in_fence or not match:
                continue
            slug = re.sub(r"[^\w\- ]", "", match.group(1).lower())
            slug = slug.replace(" ", "-")
            count = counts.get(slug, 0)
            counts[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def prose(path: str) -> str:
    """A page without its fenced blocks and code spans."""
    kept, in_fence = [], False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line.rstrip("\n")):
                in_fence = not in_fence
                continue
            if not in_fence:
                kept.append(line)
    return re.sub(r"`+[^`]*`+", "", "".join(kept))


@pytest.mark.parametrize("page", pages())
def test_links_resolve(page: str) -> None:
    """A relative link names an existing file, and an anchor into a
    Markdown page one of its headings."""
    path = os.path.join(ROOT, page)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose(path)):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        resolved = (os.path.normpath(os.path.join(os.path.dirname(path), file))
                    if file else path)
        if not os.path.exists(resolved):
            broken.append(f"{target}: no such file")
        elif anchor and resolved.endswith(".md"):
            if anchor not in heading_anchors(resolved):
                broken.append(f"{target}: no heading #{anchor}")
    assert not broken, f"{page}: " + "; ".join(broken)
