"""Kafka's JSON decoding of ARRAY and ROW columns: the vectorised reader (pyarrow's, for ARRAYs and ROWs of numbers,
booleans and text) gives exactly what the exact path (a Python parse per message) gives, bad messages included:
random batches with NULLs at every level, empty arrays, and messages of the wrong shape (a string for a number, an
unknown field, an object for an array), decoded both ways, the rows and the dead-letter records compared."""
import json
import random

import pytest

from connectors.messages import Batch, JsonDecoder
from planner import compile_program
from sqlengine.ingest import Errors

TABLE = ("CREATE TABLE t (id INT, xs INT[], items ROW(sku VARCHAR, qty INT, price DOUBLE)[], "
         "c ROW(name VARCHAR, tags VARCHAR[], ok BOOLEAN), amount DECIMAL(10,2))")


def message(rng: random.Random, i: int, bad: bool) -> bytes:
    def maybe(v, p=0.15):
        return None if rng.random() < p else v
    row = {"id": i,
           "xs": maybe([maybe(rng.randint(-3, 3)) for _ in range(rng.randint(0, 3))]),
           "items": maybe([maybe({"sku": maybe(rng.choice(["a", "b", ""])), "qty": maybe(rng.randint(0, 5)),
                                  "price": maybe(rng.choice([1.5, 2, -0.25]))}) for _ in range(rng.randint(0, 2))]),
           "c": maybe({"name": maybe("n"), "tags": maybe([maybe("t")]), "ok": maybe(rng.random() < 0.5)}),
           "amount": maybe(rng.choice([1.5, "2.25", 3]))}
    if rng.random() < 0.3:
        row.pop(rng.choice(["xs", "c", "amount"]))   # (a missing field is NULL)
    if bad:
        kind = rng.randrange(4)
        if kind == 0:
            row["xs"] = ["one"]
        elif kind == 1:
            row["c"] = {"name": "n", "extra": 1}
        elif kind == 2:
            row["items"] = {"sku": "a"}
        else:
            row["xs"] = [1.5]
    return json.dumps(row).encode()


def decoded(decoder: JsonDecoder, values):
    errs = Errors("t", "dead_letter")
    rows = []
    for chunk in decoder(Batch(values))(errs, 1000):
        table, weights = chunk[0], chunk[1]
        w = weights if isinstance(weights, list) else [weights] * table.num_rows
        rows += [json.dumps(r, sort_keys=True, default=str) + f"|{x}" for r, x in zip(table.to_pylist(), w)]
    return sorted(rows), sorted((k, v["error"]) for k, v in errs.bad.items())


@pytest.mark.parametrize("seed", range(6))
def test_the_vectorised_reader_gives_what_the_exact_path_gives(seed):
    t = compile_program(TABLE).tables["t"]
    rng = random.Random(seed)
    values = [message(rng, i, bad=seed % 2 == 1 and rng.random() < 0.1) for i in range(300)]
    fast = JsonDecoder(t, "raw")
    assert fast.fast
    exact = JsonDecoder(t, "raw")
    exact.fast = False
    assert decoded(fast, values) == decoded(exact, values)
    assert fast.fast_batches + fast.split_batches == 1 and exact.slow_batches == 1
    if seed % 2 == 0:
        assert fast.fast_batches == 1   # (no bad message: the whole batch on the vectorised reader)


MAP_TABLE = "CREATE TABLE m (id INT, tags MAP(VARCHAR, VARCHAR), n MAP(VARCHAR, BIGINT), f MAP(VARCHAR, DOUBLE), xs INT[])"


def map_message(rng: random.Random, i: int, bad: bool, nulls: bool) -> bytes:
    def obj(values):
        keys = rng.sample(["a", "b", "c", "d", "é", ""], rng.randint(0, 4))
        return {k: rng.choice(values) for k in keys}
    row = {"id": i, "tags": obj(["x", "y", ""]), "n": obj([1, -7, 2 ** 40]), "f": obj([1.5, 2, -0.0]),
           "xs": [rng.randint(0, 3)]}
    for c in ("tags", "n", "f"):
        if rng.random() < 0.15:
            row[c] = None
        elif rng.random() < 0.1:
            row.pop(c)
    if nulls and rng.random() < 0.05 and row.get("tags"):
        row["tags"][next(iter(row["tags"]))] = None   # a key whose value is NULL: present, not absent
    text = json.dumps(row)
    if bad:
        kind = rng.randrange(5)
        if kind == 0:
            text = text.replace('"n": {', '"n": {"a": "one", ', 1) if '"n": {' in text else text[:-1] + ', "zz": 1}'
        elif kind == 1:
            text = text[:-1] + ', "tags2": {}}'   # a field that is no column
        elif kind == 2:
            text = text.replace('"tags": {', '"tags": {"k": 1, "k": 2, ', 1) if '"tags": {' in text else text[:5]
        elif kind == 3:
            text = text.replace('"n": {', '"n": {"q": 1.5, ', 1) if '"n": {' in text else '[1]'
        else:
            text = text.replace('"tags": {', '"tags": {"k": [1], ', 1) if '"tags": {' in text else "{"
    return text.encode()


@pytest.mark.parametrize("seed", range(8))
def test_maps_on_the_vectorised_reader_give_what_the_exact_path_gives(seed):
    """MAP(VARCHAR, scalar) columns read as structs and made maps: the same rows and dead letters as the exact
    path, with keys given twice, values of another JSON type, unknown fields and NULL values among them."""
    t = compile_program(MAP_TABLE).tables["m"]
    rng = random.Random(seed)
    values = [map_message(rng, i, bad=seed % 2 == 1 and rng.random() < 0.1, nulls=seed % 4 == 2) for i in range(300)]
    for unknown in ("reject", "ignore"):
        fast = JsonDecoder(t, "raw", unknown_fields=unknown)
        assert fast.fast
        exact = JsonDecoder(t, "raw", unknown_fields=unknown)
        exact.fast = False
        assert decoded(fast, values) == decoded(exact, values), unknown
        if seed % 4 == 0:
            assert fast.fast_batches == 1   # (no bad message and no NULL value: the whole batch vectorised)
