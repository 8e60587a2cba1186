"""Where the coordinator's records live: in memory (tests, no --state-dir) or SQLite.

The store knows rows, not records: tables `nodes`, `actors` and `jobs` map a key to
a msgpack blob, `results` holds each job's metrics rows by iteration, `meta` holds
counters (epochs, event seq). `commit(batch)` applies one batch of changes in one
transaction; with SQLite it is in WAL mode with synchronous=FULL, so a change that
was committed (and so acknowledged) survives a kill -9 and a power cut.

Opening a state dir takes an exclusive lock (a second coordinator on the same dir
refuses), checks the database (a corrupt or truncated file refuses with how to
recover), and migrates an older schema; a newer schema refuses.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from ftrl.wire.errors import FtrlError

SCHEMA_VERSION = 1
DB_NAME = "coordinator.sqlite"
LOCK_NAME = "coordinator.lock"
TABLES = ("nodes", "actors", "jobs")
#: Results kept per job (older rows are deleted; a row is 1-10 KB: ~7 KB with learner stats).
MAX_RESULTS_PER_JOB = 100_000

#: Migrations: MIGRATIONS[v] takes a database at schema v to v + 1.
MIGRATIONS: dict[int, list[str]] = {
    0: [
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
        "CREATE TABLE nodes (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
        "CREATE TABLE actors (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
        "CREATE TABLE jobs (key TEXT PRIMARY KEY, value BLOB NOT NULL)",
        "CREATE TABLE results (job TEXT NOT NULL, iteration INTEGER NOT NULL, row BLOB NOT NULL,"
        " PRIMARY KEY (job, iteration)) WITHOUT ROWID",
    ],
}


class StateStoreError(FtrlError):
    """The state dir cannot be used: `kind` is "locked", "corrupt" or "newer"."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class Batch:
    """Changes to write in one transaction. A value of None deletes the key."""

    rows: dict[tuple[str, str], bytes | None] = field(default_factory=dict)
    meta: dict[str, bytes] = field(default_factory=dict)
    results: list[tuple[str, int, bytes]] = field(default_factory=list)
    drop_results: set[str] = field(default_factory=set)

    def put(self, table: str, key: str, value: bytes | None) -> None:
        self.rows[(table, key)] = value

    def __bool__(self) -> bool:
        return bool(self.rows or self.meta or self.results or self.drop_results)


@dataclass
class Loaded:
    """Everything a store holds, as read at start-up."""

    tables: dict[str, dict[str, bytes]]
    meta: dict[str, bytes]


class MemoryStore:
    """No durability: what a coordinator without --state-dir keeps (results included)."""

    durable = False

    def __init__(self) -> None:
        self._tables: dict[str, dict[str, bytes]] = {t: {} for t in TABLES}
        self._meta: dict[str, bytes] = {}
        self._results: dict[str, dict[int, bytes]] = {}
        self.commits = 0

    def load(self) -> Loaded:
        return Loaded({t: dict(rows) for t, rows in self._tables.items()}, dict(self._meta))

    def commit(self, batch: Batch) -> None:
        for (table, key), value in batch.rows.items():
            if value is None:
                self._tables[table].pop(key, None)
            else:
                self._tables[table][key] = value
        self._meta.update(batch.meta)
        for job in batch.drop_results:
            self._results.pop(job, None)
        for job, iteration, row in batch.results:
            rows = self._results.setdefault(job, {})
            rows[iteration] = row
            if len(rows) > MAX_RESULTS_PER_JOB:
                del rows[min(rows)]
        self.commits += 1

    def results(self, job: str, after_iteration: int = 0, limit: int = 1000) -> list[tuple[int, bytes]]:
        rows = self._results.get(job, {})
        return sorted((i, r) for i, r in rows.items() if i > after_iteration)[:limit]

    def close(self) -> None:
        pass


class SQLiteStore:
    """The durable store in `state_dir` (see the module docstring)."""

    durable = True

    def __init__(self, state_dir: str | Path, check: bool = True) -> None:
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / DB_NAME
        self._lock_fd = _lock(self.dir / LOCK_NAME)
        self.commits = 0
        try:
            self._db = self._open(check)
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _open(self, check: bool) -> sqlite3.Connection:
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA busy_timeout=5000")
            if not fresh and check:
                problems = [r[0] for r in db.execute("PRAGMA quick_check").fetchall()]
                if problems != ["ok"]:
                    raise sqlite3.DatabaseError("; ".join(problems[:5]))
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if not fresh and version == 0:
                raise sqlite3.DatabaseError("no ftrl schema version (not an ftrl state database?)")
        except sqlite3.DatabaseError as e:
            raise StateStoreError(
                f"the state database {self.path} is unreadable ({e}). Move it away and start "
                f"with `ftrl coordinator --state-dir {self.dir} --recover`, which starts from "
                "an empty database and rebuilds from what workers report and from the jobs' "
                "checkpoints", "corrupt"
            ) from None
        if version > SCHEMA_VERSION:
            db.close()
            raise StateStoreError(
                f"the state database {self.path} has schema version {version}, newer than this "
                f"ftrl understands ({SCHEMA_VERSION}); run the newer ftrl, or start this one "
                "with another --state-dir", "newer"
            )
        for v in range(version, SCHEMA_VERSION):
            db.execute("BEGIN IMMEDIATE")
            for statement in MIGRATIONS[v]:
                db.execute(statement)
            db.execute(f"PRAGMA user_version={v + 1}")
            db.execute("COMMIT")
        return db

    def load(self) -> Loaded:
        tables = {t: dict(self._db.execute(f"SELECT key, value FROM {t}").fetchall()) for t in TABLES}
        meta = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        return Loaded(tables, meta)

    def commit(self, batch: Batch) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            for (table, key), value in batch.rows.items():
                if value is None:
                    db.execute(f"DELETE FROM {table} WHERE key = ?", (key,))
                else:
                    db.execute(f"INSERT OR REPLACE INTO {table} (key, value) VALUES (?, ?)", (key, value))
            if batch.meta:
                db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", batch.meta.items())
            for job in batch.drop_results:
                db.execute("DELETE FROM results WHERE job = ?", (job,))
            if batch.results:
                db.executemany("INSERT OR REPLACE INTO results (job, iteration, row) VALUES (?, ?, ?)",
                               batch.results)
                for job in {job for job, _, _ in batch.results}:
                    db.execute(
                        "DELETE FROM results WHERE job = ? AND iteration <= (SELECT iteration FROM "
                        "results WHERE job = ? ORDER BY iteration DESC LIMIT 1 OFFSET ?)",
                        (job, job, MAX_RESULTS_PER_JOB))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self.commits += 1

    def results(self, job: str, after_iteration: int = 0, limit: int = 1000) -> list[tuple[int, bytes]]:
        return self._db.execute(
            "SELECT iteration, row FROM results WHERE job = ? AND iteration > ? ORDER BY iteration LIMIT ?",
            (job, after_iteration, limit)).fetchall()

    def close(self) -> None:
        try:
            self._db.close()
        finally:
            os.close(self._lock_fd)


def _lock(path: Path) -> int:
    """Hold an exclusive lock on `path` for the life of this process."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise StateStoreError(
            f"the state dir {path.parent} is in use by another coordinator (pid {holder}); "
            "two coordinators must not share one state dir", "locked"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def in_use(state_dir: str | Path) -> bool:
    """Whether a running coordinator holds the lock of `state_dir`."""
    path = Path(state_dir) / LOCK_NAME
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def open_store(state_dir: str | Path | None, recover: bool = False) -> MemoryStore | SQLiteStore:
    """The store for `--state-dir` (memory without one). With `recover`, an unreadable
    database is moved aside (kept as coordinator.sqlite.corrupt-N) and a fresh one made."""
    if state_dir is None:
        return MemoryStore()
    if recover:
        directory = Path(state_dir)
        directory.mkdir(parents=True, exist_ok=True)
        fd = _lock(directory / LOCK_NAME)  # never move a database another coordinator uses
        os.close(fd)
        try:
            SQLiteStore(directory).close()
        except StateStoreError as e:
            if e.kind != "corrupt":
                raise
            n = 1
            while (directory / f"{DB_NAME}.corrupt-{n}").exists():
                n += 1
            for suffix in ("", "-wal", "-shm"):
                src = directory / f"{DB_NAME}{suffix}"
                if src.exists():
                    src.rename(directory / f"{DB_NAME}{suffix}.corrupt-{n}")
    return SQLiteStore(state_dir)
