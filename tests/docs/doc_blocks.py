#!/usr/bin/python3
"""The code blocks of README.md and doc/*.md, tested (doc/architecture.md, "Examples in the docs").

usage: doc_blocks.py [--root DIR] [--try-pending] COMMAND ...
  check                          every fenced block has a marker (or a line in pending.txt), every
                                 marker is valid, and the figures the docs quote match the code
  list                           every block: where, language, what is done with it
  generate OUT.cpp [--features postgres,mysql,asio,prometheus]
                                 the C++ blocks, each wrapped, in one source (target doc_examples)
  run DBLOCK_CLI BACKEND...      run the Python and shell blocks marked `run` (BACKEND: postgres,
                                 mysql, sqlite: the backends this build holds)

A block's marker is an HTML comment (invisible on GitHub) on the nearest non-blank line before
its opening fence:
  <!-- doc-test: excerpt [why] -->            shown, never run, on purpose
  <!-- doc-test: compile [WORD...] -->        C++: compiled and linked into doc_examples, not run
  <!-- doc-test: run [WORD...] [check: EXPR] -->   C++, Python or shell: run; EXPR must then hold
C++ words: postgres, mysql, asio, prometheus (what the block needs; left out of a build without
it), toplevel (the block is a file's top level, not statements; a block with `int main` is one
anyway), coroutine (statements of an asio::awaitable<void>); tests/docs/doc_prelude.hpp says what
a block finds declared, and a C++ block marked `run` runs on a fresh embedded SQLite store.
Python and shell words: a setup, postgres, mysql or sqlite: a fresh database with dblock migrated
into it (default schema and prefix, as the docs write them) and the application's tables orders
(order 42) and exports (export 7), both in state 'new'; a Python block then runs under
`dblock run --name orders/42` (further words are more `dblock run` options: --permits 3, --name N)
and finds dsn, name, token, conn (MySQL) or path (SQLite) defined, and a check order_state(42) or
export_state(7). Without a setup a Python block runs alone, a shell block in a temp dir with the
built CLI on PATH and its embedded store there.
A figure the docs quote from the code is marked inline, `<!-- doc-figure: NAME -->VALUE`, and
VALUE must be the code's (figures() below); version numbers in package and file names and every
schema or migration number the docs name are checked without a marker.

tests/docs/pending.txt lists blocks that have no marker yet, with the marker each should get
(FILE | MARKER | FIRST LINE): `check` passes them, saying so, and fails on an entry that no
longer matches an unmarked block. --try-pending runs them as if they had that marker.
`run` exits 77 (skipped) when a setup's server is missing, unless DBLOCK_REQUIRE_SERVERS=1.
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
ANY_MARKER = re.compile(r"<!--\s*doc-test\b")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})([^`]*)$")
FIGURE = re.compile(r"<!--\s*doc-figure:\s*([\w-]+)\s*-->(\**)([0-9][0-9.]*)")
LANGUAGES = {"cpp": "cpp", "c++": "cpp", "python": "python", "py": "python", "sh": "sh", "bash": "sh",
             "shell": "sh"}
CPP_NEEDS = ("postgres", "mysql", "asio", "prometheus")
CPP_WORDS = set(CPP_NEEDS) | {"toplevel", "coroutine"}
SETUPS = ("postgres", "mysql", "sqlite")
SKIP = 77
PYTHON = "/usr/bin/python3"  # Debian's python3-psycopg and python3-pymysql are installed for it
BLOCK_TIMEOUT = 120          # seconds a Python or shell block may take (each does a few statements)


class DocError(Exception):
    pass


class Marker:
    def __init__(self, text, where):
        self.text = text
        self.check = None
        if "check:" in text:
            text, self.check = (part.strip() for part in text.split("check:", 1))
            if not self.check:
                raise DocError(f"{where}: `check:` without an expression")
        words = text.split()
        if not words or words[0] not in ("excerpt", "compile", "run"):
            raise DocError(f"{where}: a doc-test marker starts with excerpt, compile or run, not {text!r}")
        self.mode, self.words = words[0], words[1:]
        if self.mode == "excerpt":
            self.words = []  # the rest says why
            if self.check:
                raise DocError(f"{where}: an excerpt is not run, so it has no check")

    def validate(self, block):
        where = block.where
        if self.mode == "excerpt":
            return
        if block.kind is None:
            raise DocError(f"{where}: `{self.mode}` on a {block.lang or 'plain'} block: only cpp, python and sh "
                           f"blocks are built or run; mark it `excerpt`")
        if self.mode == "compile" and block.kind != "cpp":
            raise DocError(f"{where}: `compile` is for C++ blocks; a {block.kind} block is `run` or `excerpt`")
        if block.kind == "cpp":
            unknown = [w for w in self.words if w not in CPP_WORDS]
            if unknown:
                raise DocError(f"{where}: unknown C++ word(s) {unknown} (known: {sorted(CPP_WORDS)})")
            if self.mode == "run" and ("coroutine" in self.words or block.is_toplevel(self) and not block.has_main()):
                raise DocError(f"{where}: only statements or a block with `int main` can run; mark it `compile`")
        else:
            if self.words and self.words[0] not in SETUPS:
                raise DocError(f"{where}: a {block.kind} block's word is a setup, one of {list(SETUPS)}, "
                               f"not {self.words[0]!r}")
            if self.run_options and (block.kind != "python" or not self.run_options[0].startswith("--")):
                raise DocError(f"{where}: after its setup a Python block takes only `dblock run` options "
                               f"(--permits 3, --shared, --name NAME), not {self.run_options}")

    @property
    def setup(self):
        return self.words[0] if self.words else None

    @property
    def run_options(self):
        """What a Python block with a setup adds to `dblock run` (--permits 3, --shared, --name N)."""
        return self.words[1:]


class Block:
    def __init__(self, path, line, lang, lines):
        self.path, self.line, self.lang, self.lines = path, line, lang, lines
        self.kind = LANGUAGES.get(lang.lower())
        self.marker = None
        self.pending = None  # the pending.txt entry of an unmarked block

    @property
    def where(self):
        return f"{self.path}:{self.line}"

    @property
    def first_line(self):
        return next((l.strip() for l in self.lines if l.strip()), "")

    @property
    def text(self):
        return "\n".join(self.lines) + "\n"

    def has_main(self):
        return re.search(r"\bint\s+main\s*\(", self.text) is not None

    def is_toplevel(self, marker):
        return "toplevel" in marker.words or self.has_main()

    def effective(self, try_pending):
        """The marker to act on: its own, or (with --try-pending) the one pending.txt suggests."""
        if self.marker is not None:
            return self.marker
        if try_pending and self.pending is not None:
            return self.pending.marker
        return None


class Pending:
    def __init__(self, path, marker_text, first_line, where):
        self.path, self.first_line, self.where = path, first_line, where
        self.marker = Marker(marker_text, where)
        self.used = False


def code_spans_removed(line):
    """A line without its `code spans`: a marker or figure written there is shown, not meant."""
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", line)


def doc_files(root):
    files = ["README.md"] + sorted(os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "doc", "*.md")))
    return [f for f in files if os.path.exists(os.path.join(root, f))]


def parse(root, path):
    """The fenced blocks of one file with their markers; errors for stray markers."""
    with open(os.path.join(root, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, errors = [], []
    marker, marker_line = None, None
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence:
            indent, ticks, info = len(fence.group(1)), fence.group(2), fence.group(3).strip()
            j = i + 1
            while j < len(lines) and not re.match(r"^\s*" + re.escape(ticks[0]) + "{" + str(len(ticks)) + r",}\s*$",
                                                   lines[j]):
                j += 1
            body = [l[indent:] if l[:indent].strip() == "" else l.lstrip() for l in lines[i + 1:j]]
            block = Block(path, i + 1, info.split()[0] if info else "", body)
            if marker is not None:
                try:
                    block.marker = Marker(marker, f"{path}:{marker_line}")
                    block.marker.validate(block)
                except DocError as e:
                    errors.append(str(e))
                    block.marker = Marker("excerpt", block.where)  # reported; not acted on
            blocks.append(block)
            marker = None
            i = j + 1
            continue
        found = MARKER.match(line)
        if found:
            if marker is not None:
                errors.append(f"{path}:{marker_line}: a doc-test marker with no code block after it")
            marker, marker_line = found.group(1), i + 1
        elif ANY_MARKER.search(code_spans_removed(line)):
            errors.append(f"{path}:{i + 1}: a doc-test marker must be alone on its line: <!-- doc-test: ... -->")
        elif line.strip() and marker is not None:
            errors.append(f"{path}:{marker_line}: a doc-test marker must come right before a code block "
                          f"(only blank lines between)")
            marker = None
        i += 1
    if marker is not None:
        errors.append(f"{path}:{marker_line}: a doc-test marker with no code block after it")
    return blocks, errors


def load(root, pending_path):
    """Every block of the docs, with the pending entries matched to them, and the errors found."""
    blocks, errors = [], []
    for path in doc_files(root):
        found, errs = parse(root, path)
        blocks += found
        errors += errs
    entries = []
    if pending_path and os.path.exists(pending_path):
        with open(pending_path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                where = f"{os.path.basename(pending_path)}:{n}"
                parts = [p.strip() for p in line.rstrip("\n").split(" | ", 2)]
                if len(parts) != 3:
                    errors.append(f"{where}: expected FILE | MARKER | FIRST LINE OF THE BLOCK")
                    continue
                try:
                    entries.append(Pending(parts[0], parts[1], parts[2], where))
                except DocError as e:
                    errors.append(str(e))
    for entry in entries:
        matches = [b for b in blocks if b.path == entry.path and b.first_line == entry.first_line]
        if not matches:
            errors.append(f"{entry.where}: no block of {entry.path} starts with {entry.first_line!r} any more: "
                          f"remove the line (or correct it)")
        for block in matches:
            if block.marker is not None:
                errors.append(f"{entry.where}: {block.where} has a marker now: remove its line from pending.txt")
            elif block.pending is not None:
                errors.append(f"{entry.where}: {block.where} is listed twice")
            else:
                block.pending = entry
                try:
                    entry.marker.validate(block)
                except DocError as e:
                    errors.append(f"{entry.where}: suggested marker: {e}")
    for block in blocks:
        if block.marker is None and block.pending is None:
            errors.append(f"{block.where}: a {block.lang or 'plain'} block with no doc-test marker (first line: "
                          f"{block.first_line[:70]!r}): mark it run, compile or excerpt "
                          f"(doc/architecture.md, \"Examples in the docs\")")
    return blocks, errors


# --- figures: what the docs quote, from the code ----------------------------------------------

def cmake_value(root, pattern, what):
    with open(os.path.join(root, "CMakeLists.txt"), encoding="utf-8") as f:
        found = re.search(pattern, f.read(), re.S)
    if not found:
        raise DocError(f"CMakeLists.txt: {what} not found (tests/docs/doc_blocks.py reads it)")
    return found.group(1)


def migration_versions(root):
    """Every migration version of every set, from CMakeLists.txt's DBLOCK_MIGRATIONS (what is embedded)."""
    listing = cmake_value(root, r"set\(DBLOCK_MIGRATIONS\s(.*?)\)", "set(DBLOCK_MIGRATIONS ...)")
    versions = {int(v) for v in re.findall(r"/(\d{4})_\w+\.sql", listing)}
    names = set(re.findall(r"(\d{4}_\w+)\.sql", listing))
    if not versions:
        raise DocError("CMakeLists.txt: DBLOCK_MIGRATIONS names no migration")
    return versions, names


def figures(root):
    version = cmake_value(root, r"project\(dblock\s+VERSION\s+([0-9.]+)", "project(dblock VERSION ...)")
    versions, _ = migration_versions(root)
    return {
        "schema-version": str(max(versions)),  # what `dblock migrate status` calls the newest
        "version": version,
        "abi-version": cmake_value(root, r"set\(DBLOCK_ABI_VERSION\s+(\d+)\)", "DBLOCK_ABI_VERSION"),
        "migrations": str(len(versions)),
    }


# Version numbers in names: each must be the project's (or, for the packages' revision, CPack's).
VERSION_NAMES = [
    (re.compile(r"\b(?:dblock|libdblock-dev)_(\d+\.\d+\.\d+)-(\d+)_[a-z0-9]+\.deb"), "version", "deb-release"),
    (re.compile(r"\blibdblock\.so\.(\d+\.\d+\.\d+)\b"), "version", None),
    (re.compile(r"\bdblock:(\d+\.\d+\.\d+)\b"), "version", None),  # an image tag
    (re.compile(r"\bfind_package\(dblock (\d+(?:\.\d+)*)"), "version", None),
]
SCHEMA_NUMBERS = re.compile(r"\b(?:[Ss]chema(?: version)?|[Mm]igration) (\d{1,4})\b|\bin (0\d{3})\b")
MIGRATION_FILES = re.compile(r"\b(\d{4}_[a-z0-9_]+)\.sql\b")


def check_figures(root):
    values, errors, counts = figures(root), [], {"figure markers": 0, "version numbers": 0, "schema numbers": 0}
    versions, names = migration_versions(root)
    release = None
    for pattern in glob.glob(os.path.join(root, "cmake", "*.cmake")):
        with open(pattern, encoding="utf-8") as f:
            found = re.search(r"set\(CPACK_DEBIAN_PACKAGE_RELEASE\s+(\d+)\)", f.read())
        release = release or (found and found.group(1))
    for path in doc_files(root):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            text = f.read()
        for n, line in enumerate(text.split("\n"), 1):
            where = f"{path}:{n}"
            for found in FIGURE.finditer(code_spans_removed(line)):
                counts["figure markers"] += 1
                if not line[:found.start()].strip():
                    errors.append(f"{where}: a doc-figure comment at a line's start opens an HTML block "
                                  f"(the rest of the line is shown raw): move it after a word")
                name, value = found.group(1), found.group(3).rstrip(".")
                if name not in values:
                    errors.append(f"{where}: unknown figure {name!r} (known: {sorted(values)})")
                elif value != values[name]:
                    errors.append(f"{where}: the docs say {name} {value}, the code says {values[name]}")
            for pattern, figure, second in VERSION_NAMES:
                for found in pattern.finditer(line):
                    counts["version numbers"] += 1
                    quoted, actual = found.group(1), values[figure]
                    if actual != quoted and not actual.startswith(quoted + "."):
                        errors.append(f"{where}: {found.group(0)!r} quotes version {quoted}; the project is {actual}")
                    if second and release and found.group(2) != release:
                        errors.append(f"{where}: {found.group(0)!r} quotes package revision {found.group(2)}; "
                                      f"CPACK_DEBIAN_PACKAGE_RELEASE is {release}")
            for found in SCHEMA_NUMBERS.finditer(line):
                number = int(found.group(1) or found.group(2))  # "schema 10", "migration 0004", "in 0003"
                counts["schema numbers"] += 1
                if number not in versions:
                    errors.append(f"{where}: {found.group(0)!r}: no migration has version {number} "
                                  f"(CMakeLists.txt: {min(versions)}..{max(versions)})")
            for found in MIGRATION_FILES.finditer(line):
                counts["schema numbers"] += 1
                if found.group(1) not in names:
                    errors.append(f"{where}: {found.group(0)!r} is no migration in CMakeLists.txt's DBLOCK_MIGRATIONS")
    if counts["version numbers"] == 0:
        errors.append("no version number found in the docs' package, library or image names: "
                      "tests/docs/doc_blocks.py's VERSION_NAMES no longer match them")
    return errors, counts, values


# --- check and list ---------------------------------------------------------------------------

def summary(blocks, try_pending=False):
    by_file = {}
    for block in blocks:
        marker = block.effective(try_pending)
        state = marker.mode if marker is not None else "pending" if block.pending is not None else "UNMARKED"
        by_file.setdefault(block.path, {}).setdefault(state, 0)
        by_file[block.path][state] += 1
    for path, counts in by_file.items():
        print(f"  {path}: " + ", ".join(f"{counts[k]} {k}" for k in ("run", "compile", "excerpt", "pending", "UNMARKED") if k in counts))


def command_check(args):
    blocks, errors = load(args.root, args.pending)
    try:
        figure_errors, counts, values = check_figures(args.root)
    except DocError as e:
        figure_errors, counts, values = [str(e)], {}, {}
    print(f"{len(blocks)} code blocks in {len(doc_files(args.root))} files:")
    summary(blocks)
    pending = [b for b in blocks if b.marker is None and b.pending is not None]
    if pending:
        print(f"\n{len(pending)} blocks still have no marker (tests/docs/pending.txt; the aim is none):")
        for block in pending:
            print(f"  {block.where}  {block.lang or 'plain'}  wants: <!-- doc-test: {block.pending.marker.text} -->")
    print("\nfigures from the code: " + ", ".join(f"{k} {v}" for k, v in sorted(values.items())))
    print("checked in the docs: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    errors += figure_errors
    if errors:
        print(f"\n{len(errors)} problems:", file=sys.stderr)
        for error in errors:
            print(f"  {error}", file=sys.stderr)
        return 1
    return 0


def command_list(args):
    blocks, errors = load(args.root, args.pending)
    for block in blocks:
        marker = block.effective(args.try_pending)
        state = f"pending ({block.pending.marker.text})" if block.marker is None and block.pending else \
            (marker.text if marker else "UNMARKED")
        print(f"{block.where}\t{block.lang or 'plain'}\t{state}\t{block.first_line[:60]}")
    summary(blocks, args.try_pending)
    for error in errors:
        print(f"  {error}", file=sys.stderr)
    return 1 if errors else 0


# --- C++: every block in one source, compiled into doc_examples --------------------------------

def command_generate(args):
    blocks, _ = load(args.root, args.pending)  # `check` reports the errors; here a bad marker is an excerpt
    features = set(filter(None, args.features.replace(";", ",").split(",")))
    chosen = []
    for block in blocks:
        marker = block.effective(args.try_pending)
        if block.kind == "cpp" and marker is not None and marker.mode in ("compile", "run"):
            chosen.append((block, marker))
    out = ["// Generated by tests/docs/doc_blocks.py from the C++ blocks of the docs: do not edit.",
           "// Each block keeps its file and line (#line), so a compiler error names the doc.",
           '#include "doc_prelude.hpp"']
    includes, bodies, table, left_out = [], [], [], []
    for n, (block, marker) in enumerate(chosen, 1):
        missing = [need for need in CPP_NEEDS if need in marker.words and need not in features]
        if missing:
            left_out.append(f"// {block.where}: left out, this build has no {', '.join(missing)}")
            continue
        lines = []
        for line in block.lines:
            if re.match(r"^\s*#\s*include\b", line):
                includes.append(line.split("//")[0].strip())
                lines.append("")  # keeps the line numbers
            else:
                lines.append(line)
        bodies.append((n, block, marker, lines))
    out += [i for k, i in enumerate(includes) if i not in includes[:k]]
    out += left_out
    out += ["#pragma GCC diagnostic ignored \"-Wunused-variable\"  // an example shows a value it does not use",
            "#pragma GCC diagnostic ignored \"-Wunused-but-set-variable\"",
            "#pragma GCC diagnostic ignored \"-Wunused-parameter\"  // and a callback's signature whole"]

    def here():  # a #line that points back into this file, for the line after it
        return f'#line {len(out) + 2} "doc_examples.cpp"'

    for n, block, marker, lines in bodies:
        ns = f"doc_block_{n}"
        out.append(f"// {block.where}: {marker.text}")
        check = marker.check
        if block.is_toplevel(marker):
            out.append(f"namespace {ns} {{")
            out.append(f'#line {block.line + 1} "{block.path}"')
            out += lines
            out.append(here())
            out.append(f"}}  // namespace {ns}")
            if marker.mode == "run":
                argc = re.search(r"\bint\s+main\s*\(\s*int", block.text) is not None
                call = f"{ns}::main(1, doc::program_name())" if argc else f"{ns}::main()"
                out.append(f"namespace {ns} {{ void fragment(doc::Ambient& ambient_) {{")
                out.append(f"  DOC_AMBIENT(ambient_)")
                out.append(f"  if (int status = {call}; status != 0) throw doc::Failed(\"main returned \" + std::to_string(status));")
                if check:
                    out.append(f'#line {block.line} "{block.path}"')
                    out.append(f"  if (!({check})) throw doc::Failed({cpp_string('check failed: ' + check)});")
                    out.append(here())
                out.append("} }")
        else:
            coroutine = "coroutine" in marker.words
            ambient = "DOC_AMBIENT_ASIO(ambient_)" if "asio" in marker.words else "DOC_AMBIENT(ambient_)"
            result = "asio::awaitable<void>" if coroutine else "void"
            out.append(f"namespace {ns} {{")
            out.append(f"{result} fragment(doc::Ambient& ambient_) {{")
            out.append(f"  {ambient}")
            if coroutine:
                out.append("  using namespace asio::experimental::awaitable_operators;")
            out.append("  using namespace std::chrono_literals;")
            out.append("  {")
            out.append(f'#line {block.line + 1} "{block.path}"')
            out += lines
            if check:
                out.append(f'#line {block.line} "{block.path}"')
                out.append(f"  if (!({check})) throw doc::Failed({cpp_string('check failed: ' + check)});")
            out.append(here())
            out.append("  }")
            if coroutine:
                out.append("  co_return;")
            out.append("}")
            out.append(f"}}  // namespace {ns}")
        if marker.mode == "run":
            table.append(f"    {{{cpp_string(block.where)}, &{ns}::fragment}},")
    out.append("namespace {")
    out.append("const doc::Block doc_blocks[] = {")
    out += table
    out.append("    {nullptr, nullptr}};")
    out.append("}  // namespace")
    out.append("int main(int argc, char** argv) { return doc::run_blocks(argc, argv, doc_blocks); }")
    text = "\n".join(out) + "\n"
    try:
        with open(args.output, encoding="utf-8") as f:
            if f.read() == text:
                return 0  # unchanged: nothing to recompile (ninja restats custom commands)
    except FileNotFoundError:
        pass
    with open(args.output + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(args.output + ".tmp", args.output)
    return 0


def cpp_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- Python and shell blocks: run, each in a setup of its own ----------------------------------

def require_servers():
    return os.environ.get("DBLOCK_REQUIRE_SERVERS") == "1"


class Setup:
    """A fresh database with dblock migrated into it (default schema and prefix, as the docs write
    them), an application table orders(id, state) holding order 42 in state 'new', and a temp dir;
    dropped afterwards. None: only the temp dir (the CLI's embedded store in it)."""

    def __init__(self, kind, cli, tmp, serial):
        self.kind, self.cli, self.tmp = kind, cli, tmp
        self.database = f"doctest_{os.getpid()}_{serial}"
        self.dsn = None
        self.admin = None

    def __enter__(self):
        if self.kind == "postgres":
            import psycopg
            server = os.environ["DBLOCK_TEST_PG_DSN"]
            self.admin = psycopg.connect(server.split("?", 1)[0], autocommit=True)
            # From template0, which takes no connections: template1 would refuse to be copied while
            # another session is connected to it.
            self.admin.execute(f'CREATE DATABASE "{self.database}" TEMPLATE template0')
            self.dsn = with_database(server, self.database)
        elif self.kind == "mysql":
            server = os.environ["DBLOCK_TEST_MYSQL_DSN"]
            self.admin = mysql_connect(server, autocommit=True)
            with self.admin.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{self.database}` CHARACTER SET utf8mb4")
            self.dsn = with_database(server, self.database)
        elif self.kind == "sqlite":
            self.dsn = f"sqlite://{self.tmp}/app.db"
        if self.dsn:
            subprocess.run([self.cli, "--dsn", self.dsn, "migrate", "up"], check=True, stdout=subprocess.DEVNULL,
                           timeout=BLOCK_TIMEOUT)
            self.sql("CREATE TABLE orders (id INTEGER PRIMARY KEY, state VARCHAR(20) NOT NULL)",
                     "INSERT INTO orders (id, state) VALUES (42, 'new')",
                     "CREATE TABLE exports (id INTEGER PRIMARY KEY, state VARCHAR(20) NOT NULL)",
                     "INSERT INTO exports (id, state) VALUES (7, 'new')")
        return self

    def sql(self, *statements):
        conn = self.connect()
        try:
            cur = conn.cursor()
            for statement in statements:
                cur.execute(statement)
            rows = cur.fetchall() if cur.description else None
            conn.commit()
            return rows
        finally:
            conn.close()

    def connect(self):
        if self.kind == "postgres":
            import psycopg
            return psycopg.connect(self.dsn.split("?", 1)[0])
        if self.kind == "mysql":
            return mysql_connect(self.dsn)
        import sqlite3
        return sqlite3.connect(self.dsn[len("sqlite://"):], timeout=10)

    def __exit__(self, *exc):
        if self.kind == "postgres":
            self.admin.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            self.admin.close()
        elif self.kind == "mysql":
            with self.admin.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{self.database}`")
            self.admin.close()


def with_database(dsn, database):
    url = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit((url.scheme, url.netloc, "/" + database, url.query, url.fragment))


def mysql_connect(dsn, autocommit=False):
    import pymysql
    url = urllib.parse.urlsplit(dsn)
    return pymysql.connect(host=url.hostname, port=url.port or 3306, user=urllib.parse.unquote(url.username),
                           password=urllib.parse.unquote(url.password or ""),
                           database=url.path.lstrip("/") or None, autocommit=autocommit)


# What a Python block finds defined, by setup: the names the docs' examples use.
PYTHON_PRELUDE = {
    None: "",
    "postgres": """
import os
dsn = os.environ["DOC_DSN"]                   # libpq's URI of the fresh database
name, token = os.environ["DBLOCK_LOCK_NAME"], int(os.environ["DBLOCK_FENCING_TOKEN"])
def _state(table, id):
    import psycopg
    with psycopg.connect(dsn) as c:
        return c.execute(f"SELECT state FROM {table} WHERE id = %s", (id,)).fetchone()[0]
""",
    "mysql": """
import os, urllib.parse, pymysql
dsn = os.environ["DOC_DSN"]
name, token = os.environ["DBLOCK_LOCK_NAME"], int(os.environ["DBLOCK_FENCING_TOKEN"])
def _connect():
    url = urllib.parse.urlsplit(dsn)
    return pymysql.connect(host=url.hostname, port=url.port or 3306, user=urllib.parse.unquote(url.username),
                           password=urllib.parse.unquote(url.password or ""), database=url.path.lstrip("/"),
                           autocommit=False)
conn = _connect()                             # PyMySQL, autocommit off (its default)
def _state(table, id):
    c = _connect()
    with c.cursor() as cur:
        cur.execute(f"SELECT state FROM {table} WHERE id = %s", (id,))
        return cur.fetchone()[0]
""",
    "sqlite": """
import os, sqlite3
dsn = os.environ["DOC_DSN"]
path = dsn[len("sqlite://"):]                 # the database file
name, token = os.environ["DBLOCK_LOCK_NAME"], int(os.environ["DBLOCK_FENCING_TOKEN"])
def _state(table, id):
    return sqlite3.connect(path).execute(f"SELECT state FROM {table} WHERE id = ?", (id,)).fetchone()[0]
""",
}

# After every setup's own lines: what a `check:` reads (the application's tables, the setup's).
PYTHON_CHECKS = """
def order_state(id):
    return _state("orders", id)
def export_state(id):
    return _state("exports", id)
"""

PYTHON_WRAPPER = """\
import sys
g = {{"__name__": "__main__"}}
exec(compile({prelude!r}, "<doc-test setup {setup}>", "exec"), g)
exec(compile("\\n" * {skip} + {block!r}, {path!r}, "exec"), g)
check = {check!r}
if check and not eval(compile(check, {where!r} + " (check)", "eval"), g):
    sys.exit(f"{where}: check failed: {{check}}")
"""


def command_run(args):
    blocks, errors = load(args.root, args.pending)
    for error in errors:  # `check` fails on them; here they only explain a surprise
        print(f"note: {error}")
    chosen = []
    for block in blocks:
        marker = block.effective(args.try_pending)
        if block.kind in ("python", "sh") and marker is not None and marker.mode == "run":
            chosen.append((block, marker))
    if not chosen:
        print("no Python or shell block is marked `run`")
        return 1  # a test that runs nothing tests nothing
    failed, skipped = [], []
    cli = os.path.abspath(args.cli)
    for serial, (block, marker) in enumerate(chosen, 1):
        setup = marker.setup
        if setup and setup not in args.backends:
            print(f"skip {block.where}: this build has no {setup} backend")
            continue
        env_name = {"postgres": "DBLOCK_TEST_PG_DSN", "mysql": "DBLOCK_TEST_MYSQL_DSN"}.get(setup)
        if env_name and not os.environ.get(env_name):
            message = f"{block.where}: {env_name} is not set (tools/testdb.sh start)"
            if require_servers():
                failed.append(message)
                print(f"FAILED {message}")
            else:
                skipped.append(message)
                print(f"skip {message}")
            continue
        tmp = tempfile.mkdtemp(prefix="dblock-doc-")
        try:
            with Setup(setup, cli, tmp, serial) as db:
                ok, output = (run_python if block.kind == "python" else run_shell)(block, marker, db, cli, tmp)
        except Exception as e:  # the setup itself failed
            ok, output = False, f"setup {setup}: {type(e).__name__}: {e}"
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(f"{'ok' if ok else 'FAILED'} {block.where} ({marker.text})")
        if not ok:
            print("  " + output.strip().replace("\n", "\n  "))
            failed.append(block.where)
    if failed:
        print(f"\n{len(failed)} blocks failed: {', '.join(failed)}")
        return 1
    print(f"{len(chosen) - len(skipped)} Python and shell blocks ran")
    return SKIP if skipped else 0


def block_env(db, cli, tmp):
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(cli) + os.pathsep + env.get("PATH", "")
    env["HOME"] = tmp
    state = os.path.join(tmp, "state")
    os.makedirs(state, mode=0o700, exist_ok=True)
    env["DBLOCK_STATE_DIR"] = state  # the CLI's embedded store, when no DSN is given
    env.pop("XDG_STATE_HOME", None)
    env.pop("DBLOCK_DSN", None)
    if db.dsn:
        env["DOC_DSN"] = db.dsn
        env["DBLOCK_DSN"] = db.dsn
    return env


def run_python(block, marker, db, cli, tmp):
    script = os.path.join(tmp, "block.py")
    with open(script, "w", encoding="utf-8") as f:
        prelude = PYTHON_PRELUDE[db.kind] + PYTHON_CHECKS if db.dsn else ""
        f.write(PYTHON_WRAPPER.format(prelude=prelude, setup=marker.setup,
                                      skip=block.line, block=block.text, path=block.path, where=block.where,
                                      check=marker.check or ""))
    command = [PYTHON, script]
    if db.dsn:  # under a holder of the name, as the docs run it: `dblock run --name orders/42 -- python3 …`
        options = marker.run_options if "--name" in marker.run_options else \
            ["--name", "orders/42"] + marker.run_options
        command = [cli, "--dsn", db.dsn, "run", "--ttl", "60s"] + options + ["--"] + command
    result = subprocess.run(command, cwd=tmp, env=block_env(db, cli, tmp), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=BLOCK_TIMEOUT)
    return result.returncode == 0, result.stdout + f"(exit status {result.returncode})"


def run_shell(block, marker, db, cli, tmp):
    script = "set -eo pipefail\n" + block.text
    if marker.check:
        script += f"( {marker.check} ) || {{ echo {shlex.quote(block.where + ': check failed: ' + marker.check)}; exit 1; }}\n"
    result = subprocess.run(["bash", "-c", script], cwd=tmp, env=block_env(db, cli, tmp), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, timeout=BLOCK_TIMEOUT)
    return result.returncode == 0, result.stdout + f"(exit status {result.returncode})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(here)))
    parser.add_argument("--pending", default=os.path.join(here, "pending.txt"))
    parser.add_argument("--try-pending", action="store_true",
                        help="act on pending blocks as if they had the marker pending.txt suggests")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check").set_defaults(run=command_check)
    commands.add_parser("list").set_defaults(run=command_list)
    generate = commands.add_parser("generate")
    generate.add_argument("output")
    generate.add_argument("--features", default="")
    generate.set_defaults(run=command_generate)
    runner = commands.add_parser("run")
    runner.add_argument("cli")
    runner.add_argument("backends", nargs="*")
    runner.set_defaults(run=command_run)
    args = parser.parse_args()
    sys.exit(args.run(args))


if __name__ == "__main__":
    main()
