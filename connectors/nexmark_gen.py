"""Deterministic Nexmark-style event generator (numpy/pandas).

Written for this harness from the Nexmark model (Tucker et al., "NEXMark - A
Benchmark for Queries over Data Streams") and the parameter values of the
Beam/Flink Nexmark configuration; no generator code was copied.  Deliberate
difference: Flink's generator adds the person-id base to bid.bidder twice (so
bidders are offset by 1000 from person ids); here it is added once.

Part of the installed package (the ``nexmark`` source connector uses it); ``workloads/nexmark/gen.py``
re-exports it for the tests and benchmarks.

Event model
-----------
Event number ``i`` (0-based) falls in epoch ``i // 50`` at offset ``i % 50``:
offset 0 is a new person, offsets 1..3 are new auctions and offsets 4..49 are
bids (1 person : 3 auctions : 46 bids per 50 events).  Event ``i`` has event
time ``base_time + i * 1000 / events_per_second`` ms; with the default 1000
events/s every event has a distinct millisecond timestamp, which keeps
"latest by date_time" style queries deterministic.

* persons get ids 1000, 1001, ... in creation order; auctions likewise.
* an auction's seller is, with probability 1 - 1/hot_sellers_ratio, the first
  person of the current block of 100 people ("hot seller"), otherwise a random
  person among the last ``num_active_people`` created (plus up to 10 ids ahead,
  so a few sellers/bidders reference people that do not exist yet, as in the
  original generator).
* a bid's auction is, with probability 1 - 1/hot_auction_ratio, the first
  auction of the current block of 100 auctions, otherwise a random auction
  among the last ``num_in_flight_auctions`` (plus up to 10 ahead).
* a bid's bidder is, with probability 1 - 1/hot_bidders_ratio, the second
  person of the current block of 100 people, otherwise a random active person.
* prices are ``round(10 ** (6u) * 100)`` for u ~ U[0, 1) (cents, 100 .. 1e8);
  an auction's reserve is its initial bid plus another such price.
* an auction expires 1 .. 2*h ms after it opens, h being the event-time span
  in which ``num_in_flight_auctions`` more auctions are created.
* categories are 10..14; states/cities/names come from the small lists the
  benchmark uses; half of the bids come from four "hot" channels (Google,
  Facebook, Baidu, Apple), the rest from ``channel-<k>`` (k < 10000) whose URL
  carries ``&channel_id=...`` 9 times out of 10.
* ``extra`` strings pad rows towards the benchmark's average row sizes
  (person 200, auction 500, bid 100 bytes); ``extra_scale`` shrinks or
  disables them.

The output is deterministic for a given (n_events, seed, parameters).  It is
also prefix-stable: the rows for events 0..k-1 are the same whether k or more
events are generated (every random value is a hash of seed, field and event
number).

API
---
    generate(n_events, seed=0, **params) -> {"person": df, "auction": df, "bid": df}
    make_batches(tables, n_batches=4, delete_fraction=0.05, seed=0)
        -> list of ("insert"|"delete", table_name, DataFrame) in apply order
        (workloads/oracle.py's final_tables() turns such a list into final contents)

CLI
---
    python -m connectors.nexmark_gen --events 100000 --seed 1 --out DIR [--format parquet|csv]
"""
from __future__ import annotations

import argparse
import os
from typing import Dict, List, Tuple

import numpy as np
import pandas as pd

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
HOT_BLOCK = 100            # size of the id blocks whose first member is "hot"
ID_LEAD = 10               # how far ahead of the newest id a random pick may go
NUM_CHANNELS = 10_000

US_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
US_CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland",
             "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"]
FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie",
               "Sarah", "Deiter", "Walter"]
LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith",
              "Jones", "Noris"]
HOT_CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]

PERSON_COLUMNS = ["id", "name", "emailAddress", "creditCard", "city", "state",
                  "date_time", "extra"]
AUCTION_COLUMNS = ["id", "itemName", "description", "initialBid", "reserve",
                   "date_time", "expires", "seller", "category", "extra"]
BID_COLUMNS = ["auction", "bidder", "price", "channel", "url", "date_time", "extra"]

# --------------------------------------------------------------- randomness
# Every random value is a hash of (seed, stream, row key, slot), where the row
# key is the global event number.  That makes the output deterministic,
# independent of how many events are generated (prefix-stable), and cheap to
# vectorise.  Streams are small integers, one per field.


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class _Rand:
    def __init__(self, seed: int):
        self.seed = _mix(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))[0]

    def u64(self, stream: int, key, slot=0) -> np.ndarray:
        key = np.asarray(key, dtype=np.int64).astype(np.uint64)
        slot = np.asarray(slot, dtype=np.int64).astype(np.uint64)
        x = (key * np.uint64(0x9E3779B97F4A7C15)
             + slot * np.uint64(0xD1B54A32D192ED03)
             + np.uint64((stream * 0x8CB92BA72F3D8DD7) & 0xFFFFFFFFFFFFFFFF))
        return _mix(_mix(x) ^ self.seed)

    def uniform(self, stream, key, slot=0) -> np.ndarray:
        return (self.u64(stream, key, slot) >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)

    def randint(self, stream, key, bound, slot=0) -> np.ndarray:
        """Integers in [0, bound) (bound may be an array)."""
        return np.floor(self.uniform(stream, key, slot) * np.asarray(bound)).astype(np.int64)

    def strings(self, stream, key, lengths, special: str | None = " ",
                special_every: int = 13, strip: bool = True) -> List[str]:
        key = np.asarray(key, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        total = int(lengths.sum())
        if total == 0:
            return [""] * len(lengths)
        rows = np.repeat(key, lengths)
        ends = np.cumsum(lengths)
        starts = ends - lengths
        pos = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
        h = self.u64(stream, rows, pos)
        codes = (ord("a") + (h % np.uint64(26))).astype(np.uint8)
        if special is not None:
            codes[((h >> np.uint64(32)) % np.uint64(special_every)) == 0] = ord(special)
        buf = codes.tobytes().decode("ascii")
        out = [buf[s:e] for s, e in zip(starts.tolist(), ends.tolist())]
        return [t.strip() for t in out] if strip else out

    def short_strings(self, stream, key, max_len, special=" ") -> List[str]:
        """Strings of 3 .. max_len-1 characters (before trimming), as the benchmark's."""
        lengths = 3 + self.randint(stream, key, max_len - 3, slot=1 << 40)
        return self.strings(stream, key, lengths, special=special)


# stream ids
(S_P_FIRST, S_P_LAST, S_P_EMAIL_U, S_P_EMAIL_D, S_P_CC, S_P_CITY, S_P_STATE,
 S_A_SELLER_HOT, S_A_SELLER, S_A_CAT, S_A_INIT, S_A_RES, S_A_LEN, S_A_NAME,
 S_A_DESC, S_B_AUC_HOT, S_B_AUC, S_B_BIDDER_HOT, S_B_BIDDER, S_B_PRICE,
 S_B_CHAN_HOT, S_B_CHAN_HOTK, S_B_CHAN, S_URL1, S_URL2, S_URL3, S_URL_ID,
 S_EXTRA_LEN, S_EXTRA_OFF, S_POOL) = range(1, 31)

_POOL_LEN = 1 << 20


def _extras(rnd: _Rand, key, current_sizes, avg_size, scale, pool: str) -> List[str]:
    """Padding so that row size averages about avg_size bytes: slices of a
    fixed random pool (cheap, and still deterministic per event)."""
    want = np.maximum(avg_size - np.asarray(current_sizes, dtype=np.float64), 0) * scale
    delta = np.round(want * 0.2).astype(np.int64)
    base = np.round(want).astype(np.int64) - delta
    jitter = np.where(delta > 0, rnd.randint(S_EXTRA_LEN, key, np.maximum(2 * delta, 1)), 0)
    lengths = np.minimum(base + jitter, _POOL_LEN // 2)
    offs = rnd.randint(S_EXTRA_OFF, key, _POOL_LEN - lengths)
    return [pool[o:o + n] for o, n in zip(offs.tolist(), lengths.tolist())]


def _price(rnd: _Rand, stream, key):
    return np.round(np.power(10.0, rnd.uniform(stream, key) * 6.0) * 100.0).astype(np.int64)


def _reverse_bits32(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint32)
    out = np.zeros_like(x)
    for b in range(32):
        out |= ((x >> np.uint32(b)) & np.uint32(1)) << np.uint32(31 - b)
    return np.abs(out.view(np.int32).astype(np.int64))


_POOLS: Dict[int, str] = {}


def _pool(seed: int) -> str:
    """The random text the ``extra`` columns are cut from (cached: it is the same for every range)."""
    if seed not in _POOLS:
        if len(_POOLS) > 8:
            _POOLS.clear()
        _POOLS[seed] = _Rand(seed).strings(S_POOL, np.array([0]), np.array([_POOL_LEN]), special=None,
                                           strip=False)[0]
    return _POOLS[seed]


_URLS: Dict[int, Tuple[List[str], List[str]]] = {}


def _channel_urls(seed: int) -> Tuple[List[str], List[str]]:
    """The URLs of the hot channels and of ``channel-<k>`` (fixed per seed; cached)."""
    if seed not in _URLS:
        rnd = _Rand(seed)

        def base_urls(keys):
            parts = [rnd.short_strings(s, keys, 5, special="_") for s in (S_URL1, S_URL2, S_URL3)]
            return ["https://www.nexmark.com/%s/%s/%s/item.htm?query=1" % t for t in zip(*parts)]
        hot_urls = base_urls(np.arange(len(HOT_CHANNELS)) + NUM_CHANNELS)
        chan_keys = np.arange(NUM_CHANNELS)
        chan_urls = base_urls(chan_keys)
        with_id = rnd.randint(S_URL_ID, chan_keys, 10) > 0
        rev = _reverse_bits32(chan_keys)
        chan_urls = [u + ("&channel_id=%d" % rv if w else "")
                     for u, w, rv in zip(chan_urls, with_id.tolist(), rev.tolist())]
        if len(_URLS) > 8:
            _URLS.clear()
        _URLS[seed] = (hot_urls, chan_urls)
    return _URLS[seed]


def generate(n_events: int, seed: int = 0, *,
             base_time: str = "2024-01-01 00:00:00",
             events_per_second: float = 1000.0,
             person_proportion: int = 1, auction_proportion: int = 3,
             bid_proportion: int = 46,
             hot_auction_ratio: int = 2, hot_sellers_ratio: int = 4,
             hot_bidders_ratio: int = 4,
             num_in_flight_auctions: int = 100, num_active_people: int = 1000,
             avg_person_bytes: int = 200, avg_auction_bytes: int = 500,
             avg_bid_bytes: int = 100, extra_scale: float = 1.0,
             first_event: int = 0,
             ) -> Dict[str, pd.DataFrame]:
    """The rows of events ``first_event .. first_event + n_events - 1`` (prefix-stable: generating a
    stream in consecutive ranges gives the same rows as generating it at once)."""
    pp, ap, bp = person_proportion, auction_proportion, bid_proportion
    total = pp + ap + bp
    rnd = _Rand(seed)
    pool = _pool(seed)

    ev = np.arange(first_event, first_event + n_events, dtype=np.int64)
    epoch, offset = ev // total, ev % total
    is_person = offset < pp
    is_auction = (offset >= pp) & (offset < pp + ap)
    is_bid = offset >= pp + ap

    delay_ms = 1000.0 / events_per_second
    base = np.datetime64(pd.Timestamp(base_time).to_datetime64(), "ms")
    times = base + np.floor(ev * delay_ms).astype(np.int64).astype("timedelta64[ms]")

    # Newest person / auction (0-based) at each event, as the model defines it.
    last_person = epoch * pp + np.minimum(offset, pp - 1)
    last_auction = np.where(is_person, (epoch - 1) * ap + (ap - 1),
                            np.where(is_bid, epoch * ap + (ap - 1),
                                     epoch * ap + (offset - pp)))

    def random_person(stream, idx):
        n_people = last_person[idx] + 1
        active = np.minimum(n_people, num_active_people)
        return n_people - active + rnd.randint(stream, ev[idx], active + ID_LEAD)

    # ---------------------------------------------------------------- person
    pl = np.nonzero(is_person)[0]   # local indexes; pi: the event numbers, keys of the random values
    pi = ev[pl]
    names = [FIRST_NAMES[a] + " " + LAST_NAMES[b] for a, b in
             zip(rnd.randint(S_P_FIRST, pi, len(FIRST_NAMES)).tolist(),
                 rnd.randint(S_P_LAST, pi, len(LAST_NAMES)).tolist())]
    emails = [u + "@" + d + ".com" for u, d in
              zip(rnd.short_strings(S_P_EMAIL_U, pi, 7), rnd.short_strings(S_P_EMAIL_D, pi, 5))]
    cc = np.stack([rnd.randint(S_P_CC, pi, 10000, slot=k) for k in range(4)], axis=1)
    cards = ["%04d %04d %04d %04d" % tuple(row) for row in cc.tolist()]
    cities = [US_CITIES[k] for k in rnd.randint(S_P_CITY, pi, len(US_CITIES)).tolist()]
    states = [US_STATES[k] for k in rnd.randint(S_P_STATE, pi, len(US_STATES)).tolist()]
    cur = [8 + len(a) + len(b) + len(c) + len(d) + len(e)
           for a, b, c, d, e in zip(names, emails, cards, cities, states)]
    person = pd.DataFrame({
        "id": last_person[pl] + FIRST_PERSON_ID,
        "name": names, "emailAddress": emails, "creditCard": cards,
        "city": cities, "state": states, "date_time": times[pl],
        "extra": _extras(rnd, pi, cur, avg_person_bytes, extra_scale, pool),
    }, columns=PERSON_COLUMNS)

    # ---------------------------------------------------------------- auction
    al = np.nonzero(is_auction)[0]
    ai = ev[al]
    hot = rnd.randint(S_A_SELLER_HOT, ai, hot_sellers_ratio) > 0
    hot_seller = (last_person[al] // HOT_BLOCK) * HOT_BLOCK
    seller = np.where(hot, hot_seller, random_person(S_A_SELLER, al)) + FIRST_PERSON_ID
    category = FIRST_CATEGORY_ID + rnd.randint(S_A_CAT, ai, NUM_CATEGORIES)
    initial = _price(rnd, S_A_INIT, ai)
    reserve = initial + _price(rnd, S_A_RES, ai)
    horizon_events = (num_in_flight_auctions * total) // ap
    horizon_ms = max(int(np.floor(horizon_events * delay_ms)), 1)
    length_ms = 1 + rnd.randint(S_A_LEN, ai, 2 * horizon_ms)
    item = rnd.short_strings(S_A_NAME, ai, 20)
    desc = rnd.short_strings(S_A_DESC, ai, 100)
    cur = [8 + len(a) + len(b) + 40 for a, b in zip(item, desc)]
    auction = pd.DataFrame({
        "id": last_auction[al] + FIRST_AUCTION_ID,
        "itemName": item, "description": desc,
        "initialBid": initial, "reserve": reserve,
        "date_time": times[al],
        "expires": times[al] + length_ms.astype("timedelta64[ms]"),
        "seller": seller, "category": category,
        "extra": _extras(rnd, ai, cur, avg_auction_bytes, extra_scale, pool),
    }, columns=AUCTION_COLUMNS)

    # ---------------------------------------------------------------- bid
    bl = np.nonzero(is_bid)[0]
    bi = ev[bl]
    hot = rnd.randint(S_B_AUC_HOT, bi, hot_auction_ratio) > 0
    hot_auc = (last_auction[bl] // HOT_BLOCK) * HOT_BLOCK
    lo = np.maximum(last_auction[bl] - num_in_flight_auctions, 0)
    span = last_auction[bl] - lo + 1 + ID_LEAD
    auc = np.where(hot, hot_auc, lo + rnd.randint(S_B_AUC, bi, span)) + FIRST_AUCTION_ID
    hot = rnd.randint(S_B_BIDDER_HOT, bi, hot_bidders_ratio) > 0
    hot_bidder = (last_person[bl] // HOT_BLOCK) * HOT_BLOCK + 1
    bidder = np.where(hot, hot_bidder, random_person(S_B_BIDDER, bl)) + FIRST_PERSON_ID
    price = _price(rnd, S_B_PRICE, bi)

    # URLs: four fixed hot-channel URLs and one per "channel-k" (fixed per seed).
    hot_urls, chan_urls = _channel_urls(seed)
    hot = (rnd.randint(S_B_CHAN_HOT, bi, 2) > 0).tolist()
    hot_k = rnd.randint(S_B_CHAN_HOTK, bi, len(HOT_CHANNELS)).tolist()
    k = rnd.randint(S_B_CHAN, bi, NUM_CHANNELS).tolist()
    channel = [HOT_CHANNELS[h] if isH else "channel-%d" % c for isH, h, c in zip(hot, hot_k, k)]
    url = [hot_urls[h] if isH else chan_urls[c] for isH, h, c in zip(hot, hot_k, k)]
    bid = pd.DataFrame({
        "auction": auc, "bidder": bidder, "price": price,
        "channel": channel, "url": url, "date_time": times[bl],
        "extra": _extras(rnd, bi, np.full(len(bi), 32), avg_bid_bytes, extra_scale, pool),
    }, columns=BID_COLUMNS)
    return {"person": person, "auction": auction, "bid": bid}


def make_batches(tables: Dict[str, pd.DataFrame], n_batches: int = 4,
                 delete_fraction: float = 0.05, seed: int = 0
                 ) -> List[Tuple[str, str, pd.DataFrame]]:
    """Split the tables into event-time ordered insert batches and, after each
    insert batch but the first, delete a random `delete_fraction` of the rows
    inserted so far (rows are deleted at most once).  Returns the operations in
    the order they must be applied; the final table contents are
    "all inserted rows minus all deleted rows" (multiset difference)."""
    rng = np.random.default_rng(seed)
    ops: List[Tuple[str, str, pd.DataFrame]] = []
    live: Dict[str, np.ndarray] = {}
    parts = {}
    for name, df in tables.items():
        # Batches follow event time; ties keep generation order.
        order = np.argsort(df["date_time"].to_numpy(), kind="stable")
        parts[name] = np.array_split(order, n_batches)
        live[name] = np.zeros(0, dtype=np.int64)
    for b in range(n_batches):
        for name, df in tables.items():
            idx = parts[name][b]
            ops.append(("insert", name, df.iloc[idx].reset_index(drop=True)))
            live[name] = np.concatenate([live[name], idx])
        if b > 0 and delete_fraction > 0:
            for name, df in tables.items():
                k = int(round(len(live[name]) * delete_fraction))
                if k == 0:
                    continue
                pos = rng.choice(len(live[name]), size=k, replace=False)
                ops.append(("delete", name, df.iloc[live[name][pos]].reset_index(drop=True)))
                live[name] = np.delete(live[name], pos)
    return ops


def _main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--extra-scale", type=float, default=1.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--format", choices=["parquet", "csv"], default="parquet")
    a = ap.parse_args()
    t = generate(a.events, a.seed, extra_scale=a.extra_scale)
    for name, df in t.items():
        print(f"{name}: {len(df)} rows")
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            path = os.path.join(a.out, f"{name}.{a.format}")
            if a.format == "parquet":
                df.to_parquet(path, index=False)
            else:
                df.to_csv(path, index=False)


if __name__ == "__main__":
    _main()
