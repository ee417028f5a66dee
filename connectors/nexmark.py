"""``nexmark``: the Nexmark benchmark's event stream (``connectors.nexmark_gen``) as a table's input.

    CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
                      date_time TIMESTAMP, extra VARCHAR)
    WITH ('connectors' = '[{"transport": {"name": "nexmark",
                                          "config": {"table": "bid", "events": 1000000, "seed": 1}}}]')

Declare one connector on each of ``person``, ``auction`` and ``bid`` (any table names) with the same
``events``/``seed``: each generates the same deterministic event stream (1 person : 3 auctions : 46 bids
per 50 events) and keeps the events of its kind, so the three tables hold one consistent stream.  The
position is the number of events generated; a restart continues the stream.  The table's columns are
matched by name (case-insensitive) to the generator's (``PERSON_COLUMNS``, ``AUCTION_COLUMNS``,
``BID_COLUMNS`` in ``connectors.nexmark_gen``, the schema of ``workloads/nexmark/schema.sql``); it may
leave some out (e.g. ``extra``).
"""
from __future__ import annotations

import time
from typing import Any, Optional

from sqlengine.ingest import pandas_chunks

from . import nexmark_gen
from .base import Source, SourceBatch, opt, register_source

COLUMNS = {"person": nexmark_gen.PERSON_COLUMNS, "auction": nexmark_gen.AUCTION_COLUMNS,
           "bid": nexmark_gen.BID_COLUMNS}


@register_source
class Nexmark(Source):
    transport = "nexmark"
    OPTIONS = {
        "table": opt(str, required=True, choices=("person", "auction", "bid"), doc="which events this table gets"),
        "events": opt(int, doc="total events generated (all kinds; absent: unbounded)"),
        "rate": opt(int, float, doc="events per second (absent: as fast as possible)"),
        "seed": opt(int, default=0, doc="the generator's seed"),
        "batch_events": opt(int, default=100_000, doc="events generated per batch"),
        "extra_scale": opt(int, float, default=1.0, doc="size of the 'extra' padding columns (0: empty)"),
    }

    def validate(self) -> None:
        c, where = self.config, self.ctx.where
        for k in ("events", "batch_events"):
            if c[k] is not None and c[k] < (0 if k == "events" else 1):
                raise where.error(f"transport nexmark: \"{k}\" must be {'>= 0' if k == 'events' else '> 0'}", k)
        if c["rate"] is not None and c["rate"] <= 0:
            raise where.error("transport nexmark: \"rate\" must be > 0", "rate")
        have = {n.lower(): n for n in COLUMNS[c["table"]]}
        unknown = [n for n, _ in self.ctx.columns if n.lower() not in have]
        if unknown:
            raise where.error(f"transport nexmark: table {self.ctx.relation} has column {unknown[0]!r}, which "
                              f"{c['table']} events do not have; their columns: {', '.join(COLUMNS[c['table']])}",
                              "table")

    def open(self, position: Any) -> None:
        self.next = int(position or 0)
        self.t0, self.sent = time.monotonic(), 0

    def poll(self, max_rows: int) -> Optional[SourceBatch]:
        c = self.config
        n = c["batch_events"]
        if c["events"] is not None:
            n = min(n, c["events"] - self.next)
            if n <= 0:
                return None
        if c["rate"] is not None:
            allowed = int((time.monotonic() - self.t0) * c["rate"]) - self.sent
            n = min(n, allowed, max(1, int(c["rate"] / 10)))
            if n <= 0:
                time.sleep(0.05)
                return None
        lo = self.next
        self.next, self.sent = lo + n, self.sent + n
        kind, t, seed, scale = c["table"], self.ctx.table, c["seed"], float(c["extra_scale"])
        wanted = [g for g in COLUMNS[kind] if g.lower() in {f.name.lower() for f in t.fields}]

        def chunks(errs, chunk_rows):
            df = nexmark_gen.generate(n, seed, first_event=lo, extra_scale=scale)[kind][wanted]
            yield from pandas_chunks(t, df, False, errs, chunk_rows)
        return SourceBatch(chunks, self.next)

    def finished(self) -> bool:
        return self.config["events"] is not None and self.next >= self.config["events"]

    def lag(self) -> Optional[int]:
        return None if self.config["events"] is None else self.config["events"] - self.next
