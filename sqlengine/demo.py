"""The main job: an incremental pipeline over generated auction data.

Builds a Pipeline with a non-materialized view (``hot``) feeding two materialized
views, pushes deterministic (seeded) bids in ``--steps`` batches -- with the auctions
inserted through JSON, some earlier bids deleted again, one ``DELETE`` and one
``INSERT`` statement -- prints every change of ``by_cat`` as it happens, then the
final result, the pipeline status, and writes ``by_cat`` to parquet.

    python -m sqlengine.demo [--bids 20000] [--steps 8] [--out out/] [--seed 1]
"""
from __future__ import annotations

import argparse
import os

import numpy as np
import pandas as pd

from sqlengine import WEIGHT, Pipeline

PROGRAM = """
CREATE TABLE bid (auction BIGINT NOT NULL, bidder BIGINT, price BIGINT, date_time TIMESTAMP);
CREATE TABLE auction (id BIGINT NOT NULL, seller BIGINT, category INT);
CREATE VIEW hot AS SELECT auction, COUNT(*) AS n, MAX(price) AS top FROM bid GROUP BY auction HAVING COUNT(*) > 2;
CREATE MATERIALIZED VIEW by_cat AS
  SELECT a.category, SUM(h.n) AS bids, MIN(h.top) AS lowest_top
  FROM hot h JOIN auction a ON h.auction = a.id GROUP BY a.category;
CREATE MATERIALIZED VIEW top_bidders AS
  SELECT bidder, COUNT(*) AS bids, SUM(price) AS spent FROM bid GROUP BY bidder HAVING SUM(price) > 5000;
"""
N_AUCTIONS = 500


def generate(n_bids: int, seed: int):
    """Deterministic auctions (categories 0..9) and bids over them."""
    rng = np.random.default_rng(seed)
    auctions = [{"id": i, "seller": int(s), "category": int(c)} for i, (s, c) in
                enumerate(zip(rng.integers(1, 100, N_AUCTIONS), rng.integers(0, 10, N_AUCTIONS)))]
    bids = pd.DataFrame({
        "auction": rng.integers(0, N_AUCTIONS, n_bids, dtype=np.int64),
        "bidder": rng.integers(1, 300, n_bids, dtype=np.int64),
        "price": rng.integers(1, 1000, n_bids, dtype=np.int64),
        "date_time": pd.Timestamp("2024-01-01") + pd.to_timedelta(np.sort(rng.integers(0, 86400, n_bids)), "s"),
    })
    return auctions, bids, rng


def on_change(chunk: pd.DataFrame, seq_no: int) -> None:
    w = chunk[WEIGHT]
    rows = [tuple(r) for r in chunk.head(3).to_dict("split")["data"]]
    more = f" (+{len(chunk) - 3} more)" if len(chunk) > 3 else ""
    print(f"  by_cat step {seq_no}: +{int((w > 0).sum())} -{int((w < 0).sum())} "
          f"(category, bids, lowest_top, weight): {rows}{more}", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bids", type=int, default=20000, help="number of generated bids (default 20000)")
    ap.add_argument("--steps", type=int, default=8, help="number of input batches (default 8)")
    ap.add_argument("--out", default="out/", help="output directory for by_cat.parquet (default out/)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    args = ap.parse_args(argv)
    steps = max(1, args.steps)

    auctions, bids, rng = generate(args.bids, args.seed)
    alive = np.zeros(len(bids), dtype=bool)      # bids currently in the table (for deletes)
    batches = np.array_split(np.arange(len(bids)), steps)
    delete_stmt_at, insert_stmt_at = min(1, steps - 1), steps - 1

    p = Pipeline.from_sql(PROGRAM, name="demo")
    p.foreach_chunk("by_cat", on_change)
    print(f"starting pipeline (Spark): {len(bids)} bids over {N_AUCTIONS} auctions in {steps} batches", flush=True)
    p.start()
    try:
        for i, idx in enumerate(batches):
            pushed, deleted = len(idx), 0
            p.input_pandas("bid", bids.iloc[idx].reset_index(drop=True))
            if i == 0:
                p.input_json("auction", [{"insert": a} for a in auctions], update_format="insert_delete")
                pushed += len(auctions)
            else:  # retract ~5% of the bids pushed earlier
                old = np.flatnonzero(alive)
                gone = rng.choice(old, size=len(old) // 20, replace=False) if len(old) else old
                p.input_pandas("bid", bids.iloc[np.sort(gone)].reset_index(drop=True), delete=True)
                alive[gone] = False
                deleted += len(gone)
            alive[idx] = True
            if i == delete_stmt_at:
                deleted += p.execute("DELETE FROM bid WHERE price < 5")
                alive &= bids["price"].to_numpy() >= 5
            if i == insert_stmt_at:
                pushed += p.execute("INSERT INTO auction VALUES (100000, 1, 3)")
            p.wait_for_idle()
            lat = p.status()["step_latency_ms"]["last"]
            print(f"batch {i + 1}/{steps}: pushed {pushed} rows, deleted {deleted} rows, "
                  f"last step latency {lat} ms", flush=True)

        print("\nfinal by_cat:")
        print("".join(p.query_tabular("SELECT * FROM by_cat ORDER BY category")), end="")
        st = p.status()
        print(f"status: step={st['step']} rows_in={st['rows_in']} rows_out={st['rows_out']}")
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "by_cat.parquet")
        p.query_parquet("SELECT * FROM by_cat ORDER BY category", path)
        print(f"wrote {path}")
    finally:
        p.stop()


if __name__ == "__main__":
    main()
