# Copied unchanged from the acceptance workloads (workloads/slt/parse.py); see tests/slt/SOURCES.md.
"""Parser and result conventions for SQLite-style sqllogictest (.test) files.

Written for this acceptance harness (not derived from any sqllogictest
implementation's code); it follows the file format described in SQLite's
sqllogictest documentation (about.wiki):

* records are separated by blank lines; lines starting with '#' are comments
* ``statement ok`` / ``statement error``  followed by one SQL statement
* ``query <types> [<sortmode> [<label>]]`` followed by SQL, a ``----`` line and
  the expected values, either listed (one value per line in SQLite's own
  files; tab-separated values on a line are accepted too) or as
  ``N values hashing to <md5>``
* ``hash-threshold N``, ``halt``, and the conditions ``skipif <db>`` /
  ``onlyif <db>`` that may precede any record

Value formatting (used for both expected and actual results):
NULL -> ``NULL``; type ``I`` -> integer text (reals truncated toward zero);
``R`` -> ``%.3f``; ``T`` -> the text, with ``(empty)`` for '' and every
character outside ' '..'~' replaced by '@'.  Sort modes: ``nosort`` keeps the
order, ``rowsort`` sorts rows (as tuples of formatted strings), ``valuesort``
sorts all values individually.  The hash is the MD5 hex digest of every
formatted value followed by a newline, after sorting.

Usage as a script:  python parse.py FILE.test   (prints a record summary)
"""
from __future__ import annotations

import decimal
import hashlib
import math
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Optional, Sequence

HASH_RE = re.compile(r"^(\d+) values hashing to ([0-9a-fA-F]{32})\s*$")


@dataclass
class Record:
    kind: str                      # 'statement' | 'query' | 'hash-threshold' | 'halt'
    line: int                      # 1-based line number of the record header
    conditions: List[tuple] = field(default_factory=list)  # [('skipif'|'onlyif', dbname)]
    sql: str = ""
    # statement
    expect_ok: bool = True
    # query
    types: str = ""
    sortmode: str = "nosort"
    label: Optional[str] = None
    expected_values: Optional[List[str]] = None   # listed values (flattened)
    expected_hash: Optional[str] = None           # md5 hex when hashed
    expected_count: Optional[int] = None          # number of values
    # hash-threshold
    threshold: int = 0

    def applies_to(self, dbname: str) -> bool:
        """False when a skipif/onlyif condition excludes database `dbname`."""
        for cond, db in self.conditions:
            if cond == "skipif" and db == dbname:
                return False
            if cond == "onlyif" and db != dbname:
                return False
        return True


def _strip_comment(word_line: str) -> str:
    # 'onlyif sqlite # empty RHS' -> 'onlyif sqlite'
    i = word_line.find("#")
    return word_line[:i].rstrip() if i >= 0 else word_line


def parse_text(text: str) -> List[Record]:
    lines = text.split("\n")
    records: List[Record] = []
    i, n = 0, len(lines)
    conditions: List[tuple] = []
    while i < n:
        raw = lines[i].rstrip("\r")
        stripped = raw.strip()
        if stripped == "":
            i += 1
            conditions = []        # conditions belong to the block they are in
            continue
        if stripped.startswith("#"):
            i += 1
            continue
        words = _strip_comment(stripped).split()
        head = words[0] if words else ""
        lineno = i + 1
        if head in ("skipif", "onlyif"):
            conditions.append((head, words[1] if len(words) > 1 else ""))
            i += 1
            continue
        if head == "halt":
            records.append(Record("halt", lineno, conditions))
            conditions = []
            i += 1
            continue
        if head == "hash-threshold":
            records.append(Record("hash-threshold", lineno, conditions,
                                  threshold=int(words[1])))
            conditions = []
            i += 1
            continue
        if head == "statement":
            i += 1
            sql_lines = []
            while i < n and lines[i].strip() != "":
                sql_lines.append(lines[i].rstrip("\r"))
                i += 1
            records.append(Record("statement", lineno, conditions,
                                  sql="\n".join(sql_lines),
                                  expect_ok=(len(words) < 2 or words[1] == "ok")))
            conditions = []
            continue
        if head == "query":
            types = words[1] if len(words) > 1 else ""
            sortmode = words[2] if len(words) > 2 else "nosort"
            label = words[3] if len(words) > 3 else None
            i += 1
            sql_lines = []
            while i < n and lines[i].strip() not in ("", "----"):
                sql_lines.append(lines[i].rstrip("\r"))
                i += 1
            rec = Record("query", lineno, conditions, sql="\n".join(sql_lines),
                         types=types, sortmode=sortmode, label=label)
            if i < n and lines[i].strip() == "----":
                i += 1
                res_lines = []
                while i < n and lines[i].strip() != "":
                    res_lines.append(lines[i].rstrip("\r"))
                    i += 1
                m = HASH_RE.match(res_lines[0].strip()) if len(res_lines) == 1 else None
                if m:
                    rec.expected_count = int(m.group(1))
                    rec.expected_hash = m.group(2).lower()
                else:
                    vals: List[str] = []
                    for rl in res_lines:
                        vals.extend(rl.split("\t") if "\t" in rl else [rl.strip()])
                    rec.expected_values = vals
                    rec.expected_count = len(vals)
            else:
                rec.expected_values = []
                rec.expected_count = 0
            records.append(rec)
            conditions = []
            continue
        # Unknown directive: skip the whole block.
        while i < n and lines[i].strip() != "":
            i += 1
        conditions = []
    return records


def parse_file(path: str) -> List[Record]:
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        return parse_text(f.read())


# ---------------------------------------------------------------- formatting

def _to_int_text(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return "0"
        return str(int(v))                     # truncation toward zero
    if isinstance(v, decimal.Decimal):
        return str(int(v))
    s = str(v).strip()
    m = re.match(r"^[+-]?\d+", s)              # SQLite-like leading-integer parse
    return str(int(m.group(0))) if m else "0"


def _to_real_text(v: Any) -> str:
    if isinstance(v, bool):
        v = 1.0 if v else 0.0
    try:
        return "%.3f" % float(v)
    except (TypeError, ValueError):
        m = re.match(r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", str(v))
        return "%.3f" % float(m.group(0)) if m else "0.000"


def _to_text(v: Any) -> str:
    if isinstance(v, bool):
        s = "1" if v else "0"
    elif isinstance(v, float) and v == int(v) and abs(v) < 1e15:
        s = "%.1f" % v
    else:
        s = str(v)
    if s == "":
        return "(empty)"
    return "".join(ch if " " <= ch <= "~" else "@" for ch in s)


def format_value(v: Any, typ: str) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, float) and math.isnan(v):
        return "NULL"
    if typ == "I":
        return _to_int_text(v)
    if typ == "R":
        return _to_real_text(v)
    return _to_text(v)


def format_rows(rows: Sequence[Sequence[Any]], types: str, sortmode: str) -> List[str]:
    """Formatted, sorted, flattened values of a result set."""
    ftd = []
    for row in rows:
        ftd.append(tuple(format_value(v, types[j] if j < len(types) else "T")
                         for j, v in enumerate(row)))
    if sortmode == "rowsort":
        ftd.sort()
    flat = [v for row in ftd for v in row]
    if sortmode == "valuesort":
        flat.sort()
    return flat


def md5_of_values(values: Iterable[str]) -> str:
    h = hashlib.md5()
    for v in values:
        h.update(v.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def check_query(rec: Record, values: List[str]) -> bool:
    """Does the formatted value list `values` match the record's expectation?"""
    if rec.expected_hash is not None:
        return len(values) == rec.expected_count and md5_of_values(values) == rec.expected_hash
    exp = rec.expected_values or []
    if rec.sortmode == "valuesort":
        exp = sorted(exp)
    elif rec.sortmode == "rowsort" and rec.types:
        w = len(rec.types)
        rows = [tuple(exp[k:k + w]) for k in range(0, len(exp), w)]
        exp = [v for r in sorted(rows) for v in r]
    return values == exp


def _summary(path: str) -> None:
    recs = parse_file(path)
    kinds = {}
    for r in recs:
        key = r.kind if r.kind != "statement" else ("statement ok" if r.expect_ok else "statement error")
        kinds[key] = kinds.get(key, 0) + 1
    hashed = sum(1 for r in recs if r.kind == "query" and r.expected_hash)
    cond = sum(1 for r in recs if r.conditions)
    print(f"{path}: {len(recs)} records {kinds}; hashed queries={hashed}; conditional={cond}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        _summary(p)
