"""Producers that evolve, and files written badly (issue 32).

* Unknown fields: a JSON record, an Avro record, a CSV or Parquet column that is not a column of the table
  is skipped by default (the formats' ``unknown_fields`` "ignore", as Flink and RisingWave do), so a producer
  that adds a field does not send every message to the dead letter; with "reject" such a record (a JSON or
  Avro record, a row of a CSV or Parquet file with such a column) is a bad row naming the field.  A missing nullable
  field is NULL, a missing NOT NULL one a bad row.  Each checked against the bag of rows expected, with
  multiplicities.
* Files written in place into a followed ``file_input`` directory (a slow writer, ``cp``): every row arrives
  exactly once (files are read once they settled, and the lines appended to CSV/JSON files are tailed by
  byte offset, also across a restart); a file that changed after it was read is an error in ``status()``
  and in the dead letter, not a silent loss.
"""
import io
import json
import os
import threading
import time
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sqlengine.ingest.inputs import Errors
from tests.support.oracle import bag, diff

SCHEMA = "CREATE TABLE t (id BIGINT NOT NULL, g VARCHAR, v INT)"


def decl(*connectors) -> str:
    return json.dumps(list(connectors)).replace("'", "''")


def source(name, path, fmt, fmt_config=None, **transport):
    return {"name": name, "transport": {"name": "file_input", "config": {"path": str(path), **transport}},
            "format": {"name": fmt, "config": fmt_config or {}}}


def rows_of(p, table="t"):
    return bag([(r["id"], r["g"], r["v"]) for r in p.query(f"SELECT id, g, v FROM {table}")])


def dead_letters(p, key):
    path = os.path.join(p.storage_dir, "dead_letter", f"{key}.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f]


# ------------------------------------------------------------------ unknown fields: JSON
# (record, its row if the record is good whatever unknown_fields says, or "extra": good only under ignore)
JSON_RECORDS = [
    ({"id": 1, "g": "a", "v": 1}, (1, "a", 1)),
    ({"id": 2, "g": "b", "v": 2, "colour": "red"}, "extra"),           # a new field of the producer
    ({"id": 3, "v": 3}, (3, None, 3)),                                  # a missing nullable field: NULL
    ({"g": "c", "v": 4}, None),                                         # a missing NOT NULL field: bad row
    ({"id": 2, "g": "b", "v": 2, "colour": "red"}, "extra"),           # the same row again: multiplicity 2
    ({"id": 5, "G": "e", "v": 5}, (5, "e", 5)),                         # names match ignoring case
    ({"id": 6, "g": "f", "v": 6, "nested": {"x": [1, 2]}, "n": None}, "extra"),
]


def expected_json(unknown_fields):
    good = Counter()
    bad = []
    for i, (rec, row) in enumerate(JSON_RECORDS):
        if row == "extra":
            if unknown_fields == "reject":
                bad.append(i)
                continue
            row = tuple(rec[k] for k in ("id", "g", "v"))
        if row is None:
            bad.append(i)
            continue
        good[row] += 1
    return good, bad


@pytest.mark.parametrize("unknown_fields", [None, "ignore", "reject"])
@pytest.mark.parametrize("update_format", ["raw", "insert_delete"])
def test_an_extra_json_field(make_pipeline, tmp_path, unknown_fields, update_format):
    """Regression: a producer adding one field must not send every record to the dead letter."""
    d = tmp_path / "in"
    d.mkdir()
    recs = [r for r, _ in JSON_RECORDS]
    if update_format == "insert_delete":
        recs = [{"insert": r} for r in recs]
    (d / "1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    cfg = {"update_format": update_format}
    if unknown_fields:
        cfg["unknown_fields"] = unknown_fields
    p = make_pipeline(f"{SCHEMA} WITH ('connectors' = '{decl(source('in', d, 'json', cfg, settle_ms=0))}');")
    p.wait_for_completion(timeout_s=60)
    good, bad = expected_json(unknown_fields or "ignore")
    assert not diff(rows_of(p), bag(good.elements())), diff(rows_of(p), bag(good.elements()))
    dl = dead_letters(p, "t.in")
    assert sorted(r["row"] for r in dl) == bad, dl
    assert all(r["file"] == "1.jsonl" for r in dl)
    for r in dl:
        if "colour" in json.dumps(r["raw"]) or "nested" in json.dumps(r["raw"]):
            assert "unknown column" in r["error"] and ("'colour'" in r["error"] or "'nested'" in r["error"]), r
        else:
            assert "missing" in r["error"] or "NULL in a NOT NULL column" in r["error"], r
    assert p.status()["connectors"]["t.in"]["dead_letter_rows"] == len(bad)


def test_input_json_keeps_rejecting_unknown_columns(make_pipeline):
    """``Pipeline.input_json`` shares the converter but keeps its strict default: an unknown column in pushed
    input is a mistake of the caller (documented)."""
    from planner.errors import InputError
    p = make_pipeline(SCHEMA)
    with pytest.raises(InputError, match="unknown column 'colour'"):
        p.input_json("t", [{"id": 1, "g": "a", "v": 1, "colour": "red"}])
    p.input_json("t", [r for r, _ in JSON_RECORDS], on_error="dead_letter")
    p.wait_for_idle()
    good, bad = expected_json("reject")
    assert not diff(rows_of(p), bag(good.elements()))


# ------------------------------------------------------------------ unknown fields: messages (Kafka payloads)
def _table(make_pipeline):
    return make_pipeline(SCHEMA, start=False).program.tables["t"]


def _decode(dec, values):
    from connectors.messages import Batch
    errs = Errors("t", "dead_letter")
    got = Counter()
    for rows, weights in dec(Batch(values))(errs, 1000):
        ws = [weights] * rows.num_rows if isinstance(weights, int) else weights
        for r, w in zip(zip(*[rows.column(i).to_pylist() for i in range(3)]), ws):
            got[r] += w
    return got, sorted(errs.bad)


@pytest.mark.parametrize("unknown_fields", ["ignore", "reject"])
def test_extra_fields_in_json_messages(make_pipeline, unknown_fields):
    """The message decoder (Kafka): the fast path (pyarrow) skips the unknown fields itself; a batch it
    cannot take (a differently cased column) gives the same rows on the exact path."""
    from connectors.messages import decoder
    from connectors.formats import JsonFormat
    t = _table(make_pipeline)
    for update_format in ("raw", "insert_delete"):
        fmt = JsonFormat({"update_format": update_format, "unknown_fields": unknown_fields}, None)
        wrap = (lambda r: {"insert": r}) if update_format == "insert_delete" else (lambda r: r)
        # only extra fields: the fast path under ignore
        plain = [({"id": i, "g": "x", "v": i, "extra": i * 2}) for i in range(50)] + [{"id": 7, "g": "x", "v": 7}]
        dec = decoder(fmt, t)
        got, bad = _decode(dec, [json.dumps(wrap(r)).encode() for r in plain])
        if unknown_fields == "ignore":
            assert got == Counter({(r["id"], "x", r["id"]): 1 for r in plain}) + Counter({(7, "x", 7): 1})
            assert bad == [] and dec.fast_batches == 1, vars(dec)
        else:
            assert got == Counter({(7, "x", 7): 1}) and bad == list(range(50)), (got, bad)
        # the mixed records of the file test
        got, bad = _decode(decoder(fmt, t), [json.dumps(wrap(r)).encode() for r, _ in JSON_RECORDS])
        good, want_bad = expected_json(unknown_fields)
        assert got == good and bad == want_bad, (update_format, got, bad)


@pytest.mark.parametrize("unknown_fields", ["ignore", "reject"])
def test_extra_fields_in_avro_records(make_pipeline, unknown_fields):
    """An Avro writer schema with a field the table lacks."""
    fastavro = pytest.importorskip("fastavro")
    from connectors.base import Context
    from connectors.messages import AvroFormat, decoder
    t = _table(make_pipeline)
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "id", "type": "long"}, {"name": "g", "type": ["null", "string"]},
        {"name": "colour", "type": "string"}]}
    fmt = AvroFormat({"schema": json.dumps(schema), "update_format": "raw", "unknown_fields": unknown_fields},
                     Context("p", "", "t", "c"))
    parsed = fastavro.parse_schema(schema)
    values = []
    for i in (1, 2, 2):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {"id": i, "g": f"g{i}", "colour": "red"})
        values.append(buf.getvalue())
    got, bad = _decode(decoder(fmt, t), values)
    if unknown_fields == "ignore":
        assert got == Counter({(1, "g1", None): 1, (2, "g2", None): 2}) and bad == []   # v missing: NULL
    else:
        assert got == Counter() and bad == [0, 1, 2]


# ------------------------------------------------------------------ unknown fields: CSV and Parquet files
def test_csv_and_parquet_files_with_an_extra_column(make_pipeline, tmp_path):
    d = {k: tmp_path / k for k in ("csv", "csv_noheader", "pq", "pq_reject")}
    for x in d.values():
        x.mkdir()
    # by name: the extra column is skipped, a missing nullable column (v) is NULL
    (d["csv"] / "1.csv").write_text("id,colour,g,v\n1,red,a,1\n2,blue,b,2\n2,blue,b,2\n")
    (d["csv"] / "2.csv").write_text("g,id\nc,3\n")
    # without a header the fields are positional: a line with a field more is a bad row
    (d["csv_noheader"] / "1.csv").write_text("4,d,4\n5,e,5,extra\n6,f,6\n")
    pq.write_table(pa.table({"id": [7, 8, 8], "shape": ["o", "x", "x"], "g": ["h", "i", "i"]}), d["pq"] / "1.parquet")
    pq.write_table(pa.table({"id": [9, 10], "shape": ["o", None]}), d["pq_reject"] / "1.parquet")
    sql = f"""{SCHEMA} WITH ('connectors' = '{decl(
        source("csv", d["csv"], "csv"), source("csv_noheader", d["csv_noheader"], "csv", {"header": False}),
        source("pq", d["pq"], "parquet"), source("pq_reject", d["pq_reject"], "parquet",
                                                  {"unknown_fields": "reject"}))}');"""
    p = make_pipeline(sql)
    p.wait_for_completion(timeout_s=60)
    want = bag([(1, "a", 1), (2, "b", 2), (2, "b", 2), (3, "c", None), (4, "d", 4), (6, "f", 6),
                (7, "h", None), (8, "i", None), (8, "i", None)])
    assert not diff(rows_of(p), want), diff(rows_of(p), want)
    assert dead_letters(p, "t.csv") == dead_letters(p, "t.pq") == []
    (bad,) = dead_letters(p, "t.csv_noheader")
    assert bad["row"] == 1 and "malformed CSV row: expected 3 fields, got 4" in bad["error"], bad
    rejected = dead_letters(p, "t.pq_reject")   # every row of a file with an unknown column, naming it
    assert [(r["file"], r["row"], r["raw"]) for r in rejected] == \
        [("1.parquet", 0, {"id": 9, "shape": "o"}), ("1.parquet", 1, {"id": 10, "shape": None})], rejected
    assert all("unknown column 'shape'" in r["error"] for r in rejected), rejected


# ------------------------------------------------------------------ files written in place
def slow_writer(path, text, pieces, pause_every, pause_s, gap_s=0.01):
    """Write ``text`` to ``path`` in place, in ``pieces`` pieces cut anywhere (mid-line too), with a longer
    pause after every ``pause_every`` pieces, at a line's end."""
    data = text.encode()
    cuts = sorted({len(data) * k // pieces for k in range(1, pieces)} | {len(data)})
    with open(path, "wb") as f:
        at = 0
        for k, cut in enumerate(cuts):
            f.write(data[at:cut])
            f.flush()
            at = cut
            if (k + 1) % pause_every == 0 and at < len(data):
                nl = data.index(b"\n", at) + 1          # finish the line, then pause
                f.write(data[at:nl])
                f.flush()
                at = nl
                time.sleep(pause_s)
            else:
                time.sleep(gap_s)
        f.write(data[at:])


def in_place_rows(n):
    return [(i % 300, f"g{i % 7}", i % 11 if i % 13 else None) for i in range(n)]   # duplicates, NULLs


def wait_position(p, key, name, size, timeout=60):
    end = time.monotonic() + timeout
    while True:
        pos = p.status()["connectors"][key]["position"] or {}
        if name in pos and pos[name] and pos[name][0] == size:
            break
        assert time.monotonic() < end, p.status()["connectors"][key]
        time.sleep(0.02)
    p.wait_for_idle(timeout_s=timeout)


def test_a_file_written_in_place(make_pipeline, tmp_path):
    """Regression: a file written slowly into a followed directory (no rename) is read whole, exactly once:
    JSON lines and CSV tailed by byte offset, Parquet (not appendable) once it settled; a restart in the
    middle of the writing (position: bytes read per file) neither loses nor repeats a row."""
    d = {k: tmp_path / k for k in ("json", "csv", "pq")}
    for x in d.values():
        x.mkdir()
    store = str(tmp_path / "store")
    rows = in_place_rows(1000)
    json_text = "".join(json.dumps({"id": i, "g": g, "v": v}) + "\n" for i, g, v in rows)
    csv_text = "id,g,v\n" + "".join(f"{i},{g},{'' if v is None else v}\n" for i, g, v in rows)
    follow = dict(follow=True, poll_interval_ms=20, settle_ms=1000)
    conns = decl(source("json", d["json"], "json", {"update_format": "raw"}, **follow),
                 source("csv", d["csv"], "csv", **follow), source("pq", d["pq"], "parquet", **follow))
    sql = f"{SCHEMA} WITH ('connectors' = '{conns}');"
    p = make_pipeline(sql, storage_dir=store)
    array = rows[:200]   # one JSON array, pretty-printed: not tailed by lines, read once it settled
    array_text = json.dumps([{"id": i, "g": g, "v": v} for i, g, v in array], indent=1) + "\n"
    writers = [threading.Thread(target=slow_writer, args=(d["json"] / "a.jsonl", json_text, 40, 10, 0.3)),
               threading.Thread(target=slow_writer, args=(d["json"] / "b.json", array_text, 30, 1000, 0)),
               threading.Thread(target=slow_writer, args=(d["csv"] / "a.csv", csv_text, 40, 10, 0.3))]
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": [r[0] for r in rows], "g": [r[1] for r in rows],
                             "v": pa.array([r[2] for r in rows], pa.int32())}), buf, row_group_size=100)
    writers.append(threading.Thread(target=slow_writer_bytes, args=(d["pq"] / "a.parquet", buf.getvalue(), 20)))
    for w in writers:
        w.start()
    # stop while the writers write: the files are partly read
    end = time.monotonic() + 30
    while not all((p.status()["connectors"][f"t.{k}"]["position"] or {}) for k in ("json", "csv")):
        assert time.monotonic() < end
        time.sleep(0.02)
    p.stop()
    p = make_pipeline(sql, storage_dir=store)
    for w in writers:
        w.join()
    wait_position(p, "t.json", "a.jsonl", len(json_text.encode()))
    wait_position(p, "t.json", "b.json", len(array_text.encode()))
    wait_position(p, "t.csv", "a.csv", len(csv_text.encode()))
    wait_position(p, "t.pq", "a.parquet", len(buf.getvalue()))
    time.sleep(0.5)   # nothing more comes
    p.wait_for_idle()
    want = bag(rows * 3 + array)
    assert not diff(rows_of(p), want), diff(rows_of(p), want)
    for k in ("json", "csv", "pq"):
        st = p.status()["connectors"][f"t.{k}"]
        assert st["dead_letter_rows"] == 0 and st["last_error"] is None, st


def slow_writer_bytes(path, data, pieces, gap_s=0.03):
    with open(path, "wb") as f:
        for k in range(pieces):
            f.write(data[len(data) * k // pieces:len(data) * (k + 1) // pieces])
            f.flush()
            time.sleep(gap_s)


def test_a_file_changed_after_it_was_read(make_pipeline, tmp_path):
    """A Parquet file rewritten after it was read, and a followed CSV file truncated (not appended to): an
    error in status() (``last_error``) and a dead-letter record naming the file, never a silent loss."""
    d = {k: tmp_path / k for k in ("pq", "csv")}
    for x in d.values():
        x.mkdir()
    follow = dict(follow=True, poll_interval_ms=20, settle_ms=100)
    p = make_pipeline(f"""{SCHEMA} WITH ('connectors' = '{decl(source("pq", d["pq"], "parquet", **follow),
                                                              source("csv", d["csv"], "csv", **follow))}');""")
    pq.write_table(pa.table({"id": [1, 2]}), d["pq"] / "1.parquet")
    (d["csv"] / "1.csv").write_text("id,g\n10,a\n11,b\n")
    pos = {}
    end = time.monotonic() + 30
    while not (pos.get("pq", {}).get("1.parquet") and pos.get("csv", {}).get("1.csv")):
        assert time.monotonic() < end, p.status()["connectors"]
        pos = {k: p.status()["connectors"][f"t.{k}"]["position"] or {} for k in ("pq", "csv")}
        time.sleep(0.02)
    time.sleep(0.05)
    pq.write_table(pa.table({"id": [1, 2, 3, 4]}), d["pq"] / "1.parquet")   # rewritten in place
    (d["csv"] / "1.csv").write_text("id,g\n12,c\n")                          # shorter: rewritten
    for k, text in (("pq", "1.parquet changed after it was read"),
                    ("csv", "1.csv was truncated or rewritten after it was read")):
        end = time.monotonic() + 30
        while text not in (p.status()["connectors"][f"t.{k}"]["last_error"] or ""):
            assert time.monotonic() < end, p.status()["connectors"][f"t.{k}"]
            time.sleep(0.02)
        st = p.status()["connectors"][f"t.{k}"]
        # (the rewrite may be seen half done, then done: a report for each)
        assert st["state"] == "running" and st["dead_letter_rows"] >= 1, st
        recs = dead_letters(p, f"t.{k}")
        assert recs and all(r["file"] == f"1.{'parquet' if k == 'pq' else 'csv'}" and
                            "after it was read" in r["error"] for r in recs), recs
        assert any(text in r["error"] for r in recs), recs
    p.wait_for_idle()
    assert not diff(rows_of(p), bag([(1, None, None), (2, None, None), (10, "a", None), (11, "b", None)]))


def test_old_files_are_read_at_once(make_pipeline, tmp_path):
    """Reading a static directory is not slowed down by ``settle_ms``: files whose modification time is older
    than it are read as soon as they are listed."""
    d = tmp_path / "in"
    d.mkdir()
    for k in range(3):
        (d / f"{k}.csv").write_text(f"id,g\n{k},x\n")
        os.utime(d / f"{k}.csv", (time.time() - 60, time.time() - 60))
    p = make_pipeline(f"{SCHEMA} WITH ('connectors' = '{decl(source('in', d, 'csv', settle_ms=20000))}');")
    started = time.monotonic()
    p.wait_for_completion(timeout_s=60)
    assert time.monotonic() - started < 10
    assert not diff(rows_of(p), bag([(k, "x", None) for k in range(3)]))


def test_settling_and_reject(make_pipeline, tmp_path):
    """Under ``on_error`` "reject" a changed file stops the connector with the error; an unsettled file is
    not read before it settled."""
    d = tmp_path / "in"
    d.mkdir()
    p = make_pipeline(f"""{SCHEMA} WITH ('connectors' = '{decl({**source("in", d, "parquet", follow=True,
                                                                        poll_interval_ms=20, settle_ms=3000),
                                                               "on_error": "reject"})}');""")
    pq.write_table(pa.table({"id": [1]}), d / "1.parquet")
    time.sleep(1)
    assert not (p.status()["connectors"]["t.in"]["position"] or {}) and p.status()["connectors"]["t.in"]["lag"] == 1
    end = time.monotonic() + 30
    while "1.parquet" not in (p.status()["connectors"]["t.in"]["position"] or {}):
        assert time.monotonic() < end
        time.sleep(0.02)
    pq.write_table(pa.table({"id": [1, 2]}), d / "1.parquet")
    end = time.monotonic() + 30
    while p.status()["connectors"]["t.in"]["state"] != "failed":
        assert time.monotonic() < end, p.status()["connectors"]["t.in"]
        time.sleep(0.05)
    assert "1.parquet changed after it was read" in p.status()["connectors"]["t.in"]["last_error"]


def test_kills_while_a_file_is_appended_to(tmp_path):
    """Exactly once under SIGKILL: a followed JSON-lines file written in place, in pieces cut anywhere (mid-line
    too), while the pipeline reading it is killed and restarted; the position holds the bytes read."""
    from tests.support import connector_crash_child as child
    storage, out, inbox, count = str(tmp_path / "store"), str(tmp_path / "out"), str(tmp_path / "inbox"), 300
    os.makedirs(inbox)
    data = child.append_text(count)
    done = threading.Event()

    def producer():
        with open(os.path.join(inbox, child.APPEND_NAME), "wb") as f:
            pieces = 150
            for k in range(pieces):
                f.write(data[len(data) * k // pieces:len(data) * (k + 1) // pieces])
                f.flush()
                time.sleep(0.03)
        done.set()

    threading.Thread(target=producer, daemon=True).start()
    import random
    rng = random.Random(7)
    killed = 0
    for _ in range(4):
        killed += child.run_child(storage, out, count, kill_after=rng.uniform(0.8, 2.0), inbox=inbox,
                                  append=True) == -9
    assert done.wait(60)
    child.run_child(storage, out, count, inbox=inbox, append=True)
    problems = child.verify(storage, out, count, inbox=inbox, append=True)
    assert not problems, problems
    assert killed >= 2, f"only {killed} of 4 runs were killed before they finished"
