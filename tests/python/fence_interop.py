#!/usr/bin/python3
"""Fenced writes from Python (doc/sql-contract.md) against C++ holders of the same names.

usage: fence_interop.py DBLOCK_CLI BACKEND...   (BACKEND: postgres, mysql, sqlite)

For each backend: `dblock run` runs this script as the writer (it fences with its
DBLOCK_FENCING_TOKEN on a connection of its own and inserts (name, token)); under `--permits 2` and
`--shared` it fences its membership with fence_member, from DBLOCK_LOCK_OWNER and DBLOCK_LOCK_KIND; a previous holder's
token and a made-up token are refused while a `dblock run` holds the name, with the documented
SQLSTATE/errno, and nothing of them lands; committed tokens rise; a Python acquire_held/release
round trip is seen and then no longer seen by `dblock locks`. Exit 77 skips (a server or module
missing, unless DBLOCK_REQUIRE_SERVERS=1). DBLOCK_TEST_FENCE_OFF=1 makes the writer skip its fence,
only to see the test fail without it.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse

# A run of its own (never an older run's installation); the writers it starts inherit it.
PREFIX = os.environ.setdefault("DBLOCK_PYFENCE_PREFIX", f"pyfence{os.getpid()}_")
APP = PREFIX + "app"  # the application's table, beside the lock tables
COMMITTED, REFUSED, WRONG_KIND, PLAIN_ACCEPTED = 0, 3, 4, 5
SKIP = 77
PYTHON = sys.executable or "/usr/bin/python3"


# --- what an application does (the documented calls) -------------------------------------------

def connect(backend, dsn):
    """The application's own connection, without autocommit (the driver opens the transaction)."""
    if backend == "postgres":
        import psycopg
        return psycopg.connect(dsn.split("?", 1)[0])
    if backend == "mysql":
        import pymysql
        url = urllib.parse.urlsplit(dsn)
        return pymysql.connect(host=url.hostname, port=url.port or 3306, user=urllib.parse.unquote(url.username),
                               password=urllib.parse.unquote(url.password or ""), database=url.path.lstrip("/"),
                               autocommit=False)
    import sqlite3
    # isolation_level=None: the module opens no transaction itself, so BEGIN IMMEDIATE is ours.
    return sqlite3.connect(dsn[len("sqlite://"):].split("?", 1)[0], isolation_level=None, timeout=10)


def fence_and_insert(backend, conn, name, token, who, member=None):
    """One fenced transaction: the fence first, then the write. Returns COMMITTED or REFUSED.
    `member`: (owner, kind) as `dblock run` gives them for a permit or a reader: the transaction is
    fenced by that membership (fence_member, schema 10) instead of the plain fence."""
    fence_off = member is None and os.environ.get("DBLOCK_TEST_FENCE_OFF") is not None
    args = (name, *member, token) if member else (name, token)
    if backend == "postgres":
        import psycopg
        fence = f'SELECT "public"."{PREFIX}fence_member"(%s, %s, %s, %s)' if member else \
            f'SELECT "public"."{PREFIX}fence"(%s, %s)'
        try:
            with conn.transaction():
                if not fence_off:
                    conn.execute(fence, args)
                conn.execute(f"INSERT INTO {APP} (name, token, who) VALUES (%s, %s, %s)", (name, token, who))
        except psycopg.Error as e:
            if e.sqlstate == "DBF01" and "dblock fence" in str(e):
                return REFUSED
            raise
        return COMMITTED
    if backend == "mysql":
        import pymysql
        fence = f"SELECT `{PREFIX}fence_member`(%s, %s, %s, %s)" if member else f"SELECT `{PREFIX}fence`(%s, %s)"
        try:
            conn.begin()
            with conn.cursor() as cur:
                if not fence_off:
                    cur.execute(fence, args)
                cur.execute(f"INSERT INTO {APP} (name, token, who) VALUES (%s, %s, %s)", (name, token, who))
            conn.commit()
        except pymysql.err.OperationalError as e:
            conn.rollback()
            if e.args[0] == 32001 and "dblock fence" in e.args[1]:
                return REFUSED
            raise
        finally:
            with conn.cursor() as cur:  # the fence set it for the session, not the transaction
                cur.execute("SET SESSION idle_transaction_timeout = DEFAULT")
        return COMMITTED
    import sqlite3
    fence = f'INSERT INTO "{PREFIX}fence_member" (name, owner, kind, token) VALUES (?, ?, ?, ?)' if member else \
        f'INSERT INTO "{PREFIX}fence" (name, token) VALUES (?, ?)'
    try:
        conn.execute("BEGIN IMMEDIATE")
        if not fence_off:
            conn.execute(fence, args)
        conn.execute(f"INSERT INTO {APP} (name, token, who) VALUES (?, ?, ?)", (name, token, who))
        conn.execute("COMMIT")
    except sqlite3.IntegrityError as e:
        conn.execute("ROLLBACK")
        if e.sqlite_errorname == "SQLITE_CONSTRAINT_TRIGGER" and "dblock fence" in str(e):
            return REFUSED
        raise
    return COMMITTED


def fence_begin_and_insert(conn, name, token, who):
    """MySQL/MariaDB: CALL fence_begin (schema 10) starts the transaction and fences it in one
    statement. Returns COMMITTED or REFUSED."""
    import pymysql
    try:
        with conn.cursor() as cur:
            cur.execute(f"CALL `{PREFIX}fence_begin`(%s, %s)", (name, token))
            left = cur.fetchone()[0]
            check(left is not None and int(left) > 0, f"fence_begin answered {left}")
            cur.execute(f"INSERT INTO {APP} (name, token, who) VALUES (%s, %s, %s)", (name, token, who))
        conn.commit()
    except pymysql.err.OperationalError as e:
        conn.rollback()
        if e.args[0] == 32001 and "dblock fence" in e.args[1]:
            return REFUSED
        raise
    return COMMITTED


def member_fence(backend, conn, name, owner, token):
    """A reader's membership (acquire_member, schema 4) fenced with fence_member (schema 10) in a
    transaction that writes nothing: COMMITTED or REFUSED."""
    if backend == "postgres":
        import psycopg
        try:
            with conn.transaction():
                conn.execute(f'SELECT "public"."{PREFIX}fence_member"(%s, %s, %s, %s)', (name, owner, "shared", token))
        except psycopg.Error as e:
            if e.sqlstate == "DBF01" and "not a live member" in str(e):
                return REFUSED
            raise
        return COMMITTED
    import pymysql
    try:
        conn.begin()
        with conn.cursor() as cur:
            cur.execute(f"SELECT `{PREFIX}fence_member`(%s, %s, %s, %s)", (name, owner, "shared", token))
        conn.commit()
    except pymysql.err.OperationalError as e:
        conn.rollback()
        if e.args[0] == 32001 and "not a live member" in e.args[1]:
            return REFUSED
        raise
    return COMMITTED


def acquire_reader(backend, conn, name, owner, ttl_ms):
    """acquire_member as a reader: its token, or None when refused."""
    if backend == "postgres":
        row = conn.execute(f'SELECT lock_count, lock_token FROM "public"."{PREFIX}acquire_member"(%s, %s, %s, 0, %s, 0)',
                           (name, owner, "shared", ttl_ms)).fetchone()
        conn.commit()
        return None if row is None else row[1]
    with conn.cursor() as cur:
        cur.execute(f"SELECT `{PREFIX}acquire_member`(%s, %s, %s, 0, %s, 0)", (name, owner, "shared", ttl_ms * 1000))
        reply = cur.fetchone()[0]
    conn.commit()
    return None if reply is None else int(reply.split()[1])


def acquire(backend, conn, name, owner, ttl_ms):
    """acquire_held (table mode, a fresh acquisition): the token, or None when another holds it."""
    if backend == "postgres":
        row = conn.execute(f'SELECT lock_count, lock_token FROM "public"."{PREFIX}acquire_held"(%s, %s, %s, 0)',
                           (name, owner, ttl_ms)).fetchone()
        conn.commit()
        return None if row is None else row[1]
    with conn.cursor() as cur:
        cur.execute(f"SELECT `{PREFIX}acquire_held`(%s, %s, %s, 0)", (name, owner, ttl_ms * 1000))  # µs
        reply = cur.fetchone()[0]
    conn.commit()
    return None if reply is None else int(reply.split()[1])


def release(backend, conn, name, owner, token):
    """Release a lock taken once; True when it was held and is now free."""
    if backend == "postgres":
        cur = conn.execute(f'DELETE FROM "public"."{PREFIX}locks" WHERE name = %s AND owner = %s AND token = %s '
                           "AND count <= 1", (name, owner, token))
        conn.commit()
        return cur.rowcount == 1
    with conn.cursor() as cur:
        cur.execute(f"SELECT `{PREFIX}release`(%s, %s, %s)", (name, owner, token))
        left = cur.fetchone()[0]
    conn.commit()
    return left is not None and int(left) == 0


# --- the roles `dblock run` runs ---------------------------------------------------------------

def writer(backend, dsn):
    """Run by `dblock run`: fence with the run's own token and insert (name, token)."""
    name, token = os.environ["DBLOCK_LOCK_NAME"], int(os.environ["DBLOCK_FENCING_TOKEN"])
    conn = connect(backend, dsn)
    try:
        return fence_and_insert(backend, conn, name, token, "run")
    finally:
        conn.close()


def member_writer(backend, dsn, kind):
    """Run by `dblock run --permits N` or `--shared`: the member's fence with the owner and kind the
    run gives, then insert (name, token). Exits WRONG_KIND when DBLOCK_LOCK_KIND is not `kind`, and
    PLAIN_ACCEPTED when the plain fence took the member's token (it must refuse a group's row)."""
    if os.environ.get("DBLOCK_LOCK_KIND") != kind:
        print(f"DBLOCK_LOCK_KIND is {os.environ.get('DBLOCK_LOCK_KIND')!r}, not {kind!r}", file=sys.stderr)
        return WRONG_KIND
    name, token = os.environ["DBLOCK_LOCK_NAME"], int(os.environ["DBLOCK_FENCING_TOKEN"])
    owner = os.environ["DBLOCK_LOCK_OWNER"]
    conn = connect(backend, dsn)
    try:
        if fence_and_insert(backend, conn, name, token, "plain") != REFUSED:
            print(f"the plain fence accepted the {kind}'s token {token}", file=sys.stderr)
            return PLAIN_ACCEPTED
        return fence_and_insert(backend, conn, name, token, kind, member=(owner, kind))
    finally:
        conn.close()


def holder(token_file, release_file):
    """Run by `dblock run`: publish the token, hold the name until told (at most 15 s)."""
    with open(token_file + ".tmp", "w") as f:
        f.write(os.environ["DBLOCK_FENCING_TOKEN"])
    os.rename(token_file + ".tmp", token_file)
    deadline = time.monotonic() + 15
    while not os.path.exists(release_file) and time.monotonic() < deadline:
        time.sleep(0.02)
    return 0


# --- the test ----------------------------------------------------------------------------------

class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


class Case:
    def __init__(self, cli, backend, dsn, work):
        self.cli, self.backend, self.work = cli, backend, work
        self.dsn = dsn  # the application's connection string
        self.cli_dsn = dsn + ("&" if "?" in dsn else "?") + "prefix=" + PREFIX
        self.name = f"py/fence/{backend}/{os.getpid()}"

    def dblock(self, *args, **kw):
        return subprocess.run([self.cli, "--dsn", self.cli_dsn, *args], capture_output=True, text=True,
                              timeout=30, **kw)

    def run_writer(self, env=None):
        """`dblock run --ttl 2s -- python3 writer`; returns the writer's exit code."""
        p = self.dblock("run", "--name", self.name, "--ttl", "2s", "--wait", "10s", "--", PYTHON,
                        os.path.abspath(__file__), "--write", self.backend, self.dsn, env=env)
        check(p.returncode in (COMMITTED, REFUSED), f"dblock run writer exited {p.returncode}: {p.stderr.strip()}")
        return p.returncode

    def run_member_writer(self, name, option, kind):
        """`dblock run OPTION -- python3 member-writer`; returns the writer's exit code."""
        p = self.dblock("run", "--name", name, *option, "--ttl", "2s", "--wait", "10s", "--", PYTHON,
                        os.path.abspath(__file__), "--write-member", self.backend, self.dsn, kind)
        check(p.returncode in (COMMITTED, REFUSED), f"dblock run {' '.join(option)} writer exited {p.returncode}: "
                                                    f"{p.stderr.strip()}")
        return p.returncode

    def stale_write(self, token, who):
        conn = connect(self.backend, self.dsn)
        try:
            return fence_and_insert(self.backend, conn, self.name, token, who)
        finally:
            conn.close()

    def rows(self, name=None):
        conn = connect(self.backend, self.dsn)
        try:
            cur = conn.cursor()
            mark = "?" if self.backend == "sqlite" else "%s"
            cur.execute(f"SELECT token, who FROM {APP} WHERE name = {mark} ORDER BY token, who", (name or self.name,))
            rows = [(int(t), w) for t, w in cur.fetchall()]
            if self.backend != "sqlite":
                conn.commit()
            return rows
        finally:
            conn.close()

    def locks(self):
        p = self.dblock("locks", "--json")
        check(p.returncode == 0, f"dblock locks exited {p.returncode}: {p.stderr.strip()}")
        return {row["name"]: row for row in json.loads(p.stdout)}

    def setup(self):
        p = self.dblock("migrate", "up")
        check(p.returncode == 0, f"dblock migrate up exited {p.returncode}: {p.stderr.strip()}")
        conn = connect(self.backend, self.dsn)
        try:
            conn.cursor().execute(f"CREATE TABLE IF NOT EXISTS {APP} (name VARCHAR(255) NOT NULL, "
                                  "token BIGINT NOT NULL, who VARCHAR(64) NOT NULL)")
            if self.backend != "sqlite":
                conn.commit()
        finally:
            conn.close()

    def run(self):
        self.setup()
        # (1) Two `dblock run` writers in turn: each fences with its own token and commits.
        check(self.run_writer() == COMMITTED, "the first dblock run writer's fenced write was refused")
        check(self.run_writer() == COMMITTED, "the second dblock run writer's fenced write was refused")
        committed = self.rows()
        check(len(committed) == 2 and committed[0][0] < committed[1][0],
              f"expected two committed writes with rising tokens, got {committed}")
        first, second = committed[0][0], committed[1][0]

        # (2) and (3): while a `dblock run` (C++) holds the name, a previous holder's token and a
        # made-up one are refused with the documented code, and nothing of theirs lands.
        token_file, release_file = os.path.join(self.work, "token"), os.path.join(self.work, "release")
        for f in (token_file, release_file):
            if os.path.exists(f):
                os.remove(f)
        hold = subprocess.Popen([self.cli, "--dsn", self.cli_dsn, "run", "--name", self.name, "--ttl", "2s", "--wait",
                                 "10s", "--", PYTHON, os.path.abspath(__file__), "--hold", token_file, release_file],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 10
            while not os.path.exists(token_file) and hold.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            check(os.path.exists(token_file), f"the dblock run holder did not start ({hold.poll()})")
            held = int(open(token_file).read())
            check(held > second, f"the holder's token {held} is not above the writers' {second}")
            check(self.stale_write(first, "stale") == REFUSED, "a previous holder's token was not refused")
            check(self.stale_write(second, "stale") == REFUSED, "the last writer's token was not refused after its run")
            check(self.stale_write(held + 1000, "made-up") == REFUSED, "a made-up token was not refused")
        finally:
            open(release_file, "w").close()
            out, err = hold.communicate(timeout=20)
        check(hold.returncode == 0, f"the dblock run holder exited {hold.returncode}: {err.strip()}")
        committed = self.rows()
        check(committed == [(first, "run"), (second, "run")], f"a refused write landed: {committed}")

        # (4) A permit's and a reader's `dblock run` fence their own membership with fence_member,
        # from the owner and kind the run gives them (DBLOCK_LOCK_OWNER, DBLOCK_LOCK_KIND), and commit;
        # the plain fence refuses their token first, and nothing of that attempt lands.
        for option, kind in ((("--permits", "2"), "permit"), (("--shared",), "shared")):
            name = f"{self.name}/{kind}"
            check(self.run_member_writer(name, option, kind) == COMMITTED,
                  f"a dblock run {' '.join(option)} writer's fence_member was refused")
            written = self.rows(name)
            check(len(written) == 1 and written[0][1] == kind, f"the {kind}'s fenced write did not land: {written}")

        # The acquire/release contract from Python, beside the CLI (not documented for SQLite).
        if self.backend != "sqlite":
            conn = connect(self.backend, self.dsn)
            try:
                owner = f"python:{os.getpid()}"
                token = acquire(self.backend, conn, self.name, owner, 5000)
                check(token is not None and token > held, f"Python's acquire_held got {token}, after {held}")
                row = self.locks().get(self.name)
                check(row is not None and row["token"] == token and row["owner"] == owner,
                      f"dblock locks does not show Python's grant: {row}")
                check(acquire(self.backend, conn, self.name, "someone-else", 5000) is None,
                      "acquire_held granted a name Python holds to another owner")
                check(fence_and_insert(self.backend, conn, self.name, token, "python") == COMMITTED,
                      "Python's own grant did not fence")
                if self.backend == "mysql":
                    check(fence_begin_and_insert(conn, self.name, token + 1000, "python-begin") == REFUSED,
                          "fence_begin accepted a made-up token")
                    check(fence_begin_and_insert(conn, self.name, token, "python-begin") == COMMITTED,
                          "Python's own grant did not fence with fence_begin")
                check(release(self.backend, conn, self.name, owner, token), "Python's release did not free the lock")
                check(self.name not in self.locks(), "dblock locks still shows the lock Python released")
            finally:
                conn.close()
            check(self.run_writer() == COMMITTED, "a dblock run writer after Python's release was refused")
            committed = self.rows()
            # A reader's fence from Python: live membership passes, another owner's does not.
            conn = connect(self.backend, self.dsn)
            try:
                reader = acquire_reader(self.backend, conn, self.name + "/rw", f"python-reader:{os.getpid()}", 5000)
                check(reader is not None, "Python's acquire_member as a reader was refused")
                check(member_fence(self.backend, conn, self.name + "/rw", f"python-reader:{os.getpid()}", reader)
                      == COMMITTED, "a live reader's fence_member was refused")
                check(member_fence(self.backend, conn, self.name + "/rw", "not-a-member", reader) == REFUSED,
                      "fence_member accepted an owner that is not a member")
            finally:
                conn.close()
            expected = ["run", "run", "python"] + (["python-begin"] if self.backend == "mysql" else []) + ["run"]
            # fence_begin's write used Python's grant again: one token, two writes.
            distinct = [row for row in committed if row[1] != "python-begin"]
            check([w for _, w in committed] == expected and
                  all(a[0] < b[0] for a, b in zip(distinct, distinct[1:])),
                  f"tokens do not rise across Python and the CLI: {committed}")


def server_dsn(backend, work):
    if backend == "postgres":
        return os.environ.get("DBLOCK_TEST_PG_DSN")
    if backend == "mysql":
        return os.environ.get("DBLOCK_TEST_MYSQL_DSN")
    return "sqlite://" + os.path.join(work, "store.db")


def main(argv):
    if len(argv) >= 2 and argv[1] == "--write":
        return writer(argv[2], argv[3])
    if len(argv) >= 2 and argv[1] == "--write-member":
        return member_writer(argv[2], argv[3], argv[4])
    if len(argv) >= 2 and argv[1] == "--hold":
        return holder(argv[2], argv[3])
    cli, backends = argv[1], argv[2:]
    required = os.environ.get("DBLOCK_REQUIRE_SERVERS") == "1"
    failed, skipped = [], []
    for backend in backends:
        with tempfile.TemporaryDirectory(prefix="dblock-py-") as work:
            dsn = server_dsn(backend, work)
            module = {"postgres": "psycopg", "mysql": "pymysql", "sqlite": "sqlite3"}[backend]
            try:
                __import__(module)
            except ImportError:
                dsn = None
            if not dsn:
                (failed if required else skipped).append(f"{backend}: no server DSN or no {module} module")
                continue
            started = time.monotonic()
            try:
                Case(cli, backend, dsn, work).run()
                print(f"{backend}: ok ({time.monotonic() - started:.1f} s)")
            except Failure as e:
                failed.append(f"{backend}: {e}")
    for line in skipped:
        print(f"skipped {line}")
    for line in failed:
        print(f"FAILED {line}", file=sys.stderr)
    if failed:
        return 1
    return SKIP if skipped and len(skipped) == len(backends) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
