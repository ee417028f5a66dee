"""Deterministic generator of TPC-H-shaped tables (numpy/pandas).

Written for this harness from the TPC-H specification's data rules
(Clause 4.2.3: cardinalities, key formulas, value ranges and word lists); it is
NOT dbgen and does not reproduce dbgen's exact rows, so published TPC-H answer files do not apply to its data.

Copied into sqlengine from the shared workloads (workloads/tpch/gen.py there);
this copy has only the native generator (the optional dbgen backend, which
needs a DuckDB tpch extension, was removed).  What it keeps:

* cardinalities: supplier 10k*SF, part 200k*SF, partsupp 4 per part,
  customer 150k*SF, orders 1.5M*SF (sparse keys: 8 used out of every 32),
  lineitem 1..7 per order (~6M*SF), nation 25, region 5
* fixed nation/region names and nation->region map; phone country code =
  nationkey + 10 (Q22)
* part names of 5 distinct colour words (Q9 '%green%', Q20 'forest%'), types
  from the three syllable lists (Q2 '%BRASS', Q8, Q14 'PROMO%', Q16),
  containers (Q17, Q19), brands/manufacturers, retail price formula
* partsupp supplier formula, and lineitem suppliers drawn from the part's four
* order dates uniform in [1992-01-01, 1998-08-02]; ship/commit/receipt offsets;
  return flag / line status relative to 1995-06-17; order status from lines;
  o_totalprice from lines; customers with key divisible by 3 have no orders
* comments from a pseudo-text vocabulary that includes the words the queries
  look for ('special ... requests', 'Customer ... Complaints')

Money/fractions are float64 rounded to cents in the DataFrames; schema.sql
declares DECIMAL(15,2), so load them by casting to the schema (the oracle's
``INSERT INTO t BY NAME SELECT * FROM df`` does).  Dates are datetime64[s] at
midnight; schema.sql declares DATE.

API
---
    generate(sf=0.01, seed=0) -> {table: DataFrame}
    make_batches(tables, n_batches=4, delete_fraction=0.05, seed=0)
        -> [("insert"|"delete", table, DataFrame), ...] (orders and their
        lineitems are inserted in the same batch; deletes remove whole orders
        together with their lineitems, plus a few customers/parts)

CLI
---
    python -m workloads.tpch.gen --sf 0.01 --seed 0 [--out DIR]
"""
from __future__ import annotations

import argparse
import os
from typing import Dict, List, Tuple

import numpy as np
import pandas as pd

REGIONS = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"]
NATIONS = [  # (name, regionkey), nationkey = position
    ("ALGERIA", 0), ("ARGENTINA", 1), ("BRAZIL", 1), ("CANADA", 1), ("EGYPT", 4),
    ("ETHIOPIA", 0), ("FRANCE", 3), ("GERMANY", 3), ("INDIA", 2), ("INDONESIA", 2),
    ("IRAN", 4), ("IRAQ", 4), ("JAPAN", 2), ("JORDAN", 4), ("KENYA", 0),
    ("MOROCCO", 0), ("MOZAMBIQUE", 0), ("PERU", 1), ("CHINA", 2), ("ROMANIA", 3),
    ("SAUDI ARABIA", 4), ("VIETNAM", 2), ("RUSSIA", 3), ("UNITED KINGDOM", 3),
    ("UNITED STATES", 1)]
COLORS = (
    "almond antique aquamarine azure beige bisque black blanched blue blush brown "
    "burlywood burnished chartreuse chiffon chocolate coral cornflower cornsilk cream "
    "cyan dark deep dim dodger drab firebrick floral forest frosted gainsboro ghost "
    "goldenrod green grey honeydew hot indian ivory khaki lace lavender lawn lemon "
    "light lime linen magenta maroon medium metallic midnight mint misty moccasin "
    "navajo navy olive orange orchid pale papaya peach peru pink plum powder puff "
    "purple red rose rosy royal saddle salmon sandy seashell sienna sky slate smoke "
    "snow spring steel tan thistle tomato turquoise violet wheat white yellow").split()
TYPE_S1 = ["STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"]
TYPE_S2 = ["ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"]
TYPE_S3 = ["TIN", "NICKEL", "BRASS", "STEEL", "COPPER"]
CONT_S1 = ["SM", "LG", "MED", "JUMBO", "WRAP"]
CONT_S2 = ["CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"]
SEGMENTS = ["AUTOMOBILE", "BUILDING", "FURNITURE", "MACHINERY", "HOUSEHOLD"]
PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
INSTRUCTIONS = ["DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN"]
MODES = ["REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB"]
# pseudo-text vocabulary (a subset of the spec's grammar words)
WORDS = (
    "furious sly careful blithe quick fluffy slow quiet ruthless thin close dogged "
    "daring brave stealthy permanent enticing idle busy regular final ironic even "
    "bold silent foxes ideas theodolites pinto beans instructions dependencies "
    "excuses platelets asymptotes courts dolphins multipliers warthogs frets dinos "
    "attainments somas patterns forges braids frays dugouts epitaphs pearls tithes "
    "waters orbits gifts sheaves depths sentiments decoys realms pains grouches "
    "packages requests accounts deposits special pending express unusual sleep wake "
    "are cajole haggle nag use boost affix detect integrate maintain nod was lose "
    "sublate solve thrash promise engage hinder print breach eat grow impress "
    "sometimes always never furiously slyly carefully blithely quickly fluffily "
    "slowly quietly ruthlessly about above across after against along among around "
    "at before behind beneath beside between beyond by during for from in inside "
    "into near of on outside over past since through to toward under until upon "
    "with within").split()

START = np.datetime64("1992-01-01", "D")
END = np.datetime64("1998-12-31", "D")
CURRENT = np.datetime64("1995-06-17", "D")


def _text(rng, n, min_len, max_len) -> List[str]:
    """Pseudo-sentences of random words, cut to a random length in [min_len, max_len]."""
    k = max(2, (max_len // 5) + 1)
    idx = rng.integers(0, len(WORDS), size=(n, k))
    lens = rng.integers(min_len, max_len + 1, size=n)
    out = []
    for row, ln in zip(idx.tolist(), lens.tolist()):
        s = " ".join(WORDS[w] for w in row)
        out.append(s[:ln].rstrip())
    return out


def _phones(rng, nationkeys) -> List[str]:
    n = len(nationkeys)
    a = rng.integers(100, 1000, n)
    b = rng.integers(100, 1000, n)
    c = rng.integers(1000, 10000, n)
    return ["%02d-%03d-%03d-%04d" % t for t in zip((np.asarray(nationkeys) + 10).tolist(),
                                                    a.tolist(), b.tolist(), c.tolist())]


def _money(rng, n, lo, hi):
    """Uniform cents in [lo, hi] as float rounded to 2 decimals."""
    return np.round(rng.integers(int(round(lo * 100)), int(round(hi * 100)) + 1, n) / 100.0, 2)


def _suppliers_of(partkey: np.ndarray, j: np.ndarray, S: int) -> np.ndarray:
    """The spec's partsupp supplier formula for the j-th (0..3) supplier of a part."""
    return (partkey + j * ((S // 4) + (partkey - 1) // S)) % S + 1


def _as_dates(d: np.ndarray) -> np.ndarray:
    return d.astype("datetime64[s]")


def generate_python(sf: float = 0.01, seed: int = 0) -> Dict[str, pd.DataFrame]:
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x7C4]))
    S = max(int(round(10_000 * sf)), 4)
    P = max(int(round(200_000 * sf)), 1)
    C = max(int(round(150_000 * sf)), 3)
    O = max(int(round(1_500_000 * sf)), 1)

    region = pd.DataFrame({"r_regionkey": np.arange(5, dtype=np.int32), "r_name": REGIONS,
                           "r_comment": _text(rng, 5, 31, 115)})
    nation = pd.DataFrame({"n_nationkey": np.arange(25, dtype=np.int32),
                           "n_name": [n for n, _ in NATIONS],
                           "n_regionkey": np.array([r for _, r in NATIONS], dtype=np.int32),
                           "n_comment": _text(rng, 25, 31, 114)})

    # supplier
    sk = np.arange(1, S + 1, dtype=np.int64)
    s_nat = rng.integers(0, 25, S).astype(np.int32)
    s_comment = _text(rng, S, 25, 100)
    n_special = max(1, int(round(5 * sf * 10)))        # a few "Customer ... Complaints/Recommends"
    for pos in rng.choice(S, size=min(S, 2 * n_special), replace=False)[:n_special]:
        s_comment[pos] = ("carefully Customer final Complaints " + s_comment[pos])[:100]
    supplier = pd.DataFrame({
        "s_suppkey": sk, "s_name": ["Supplier#%09d" % k for k in sk.tolist()],
        "s_address": _text(rng, S, 10, 40), "s_nationkey": s_nat,
        "s_phone": _phones(rng, s_nat), "s_acctbal": _money(rng, S, -999.99, 9999.99),
        "s_comment": s_comment})

    # part
    pk = np.arange(1, P + 1, dtype=np.int64)
    # 5 distinct colours per part: first 5 of a random permutation, via argsort of noise
    noise = rng.random((P, len(COLORS)))
    pick = np.argpartition(noise, 5, axis=1)[:, :5]
    p_name = [" ".join(COLORS[c] for c in row) for row in pick.tolist()]
    m = rng.integers(1, 6, P)
    nb = rng.integers(1, 6, P)
    t1, t2, t3 = (rng.integers(0, len(x), P) for x in (TYPE_S1, TYPE_S2, TYPE_S3))
    c1, c2 = rng.integers(0, len(CONT_S1), P), rng.integers(0, len(CONT_S2), P)
    retail = (90000 + ((pk // 10) % 20001) + 100 * (pk % 1000)) / 100.0
    part = pd.DataFrame({
        "p_partkey": pk, "p_name": p_name,
        "p_mfgr": ["Manufacturer#%d" % x for x in m.tolist()],
        "p_brand": ["Brand#%d%d" % (x, y) for x, y in zip(m.tolist(), nb.tolist())],
        "p_type": [f"{TYPE_S1[a]} {TYPE_S2[b]} {TYPE_S3[c]}" for a, b, c in
                   zip(t1.tolist(), t2.tolist(), t3.tolist())],
        "p_size": rng.integers(1, 51, P).astype(np.int32),
        "p_container": [f"{CONT_S1[a]} {CONT_S2[b]}" for a, b in zip(c1.tolist(), c2.tolist())],
        "p_retailprice": np.round(retail, 2), "p_comment": _text(rng, P, 5, 22)})

    # partsupp
    ps_part = np.repeat(pk, 4)
    ps_j = np.tile(np.arange(4, dtype=np.int64), P)
    partsupp = pd.DataFrame({
        "ps_partkey": ps_part, "ps_suppkey": _suppliers_of(ps_part, ps_j, S),
        "ps_availqty": rng.integers(1, 10000, 4 * P).astype(np.int32),
        "ps_supplycost": _money(rng, 4 * P, 1.00, 1000.00),
        "ps_comment": _text(rng, 4 * P, 49, 198)})

    # customer
    ck = np.arange(1, C + 1, dtype=np.int64)
    c_nat = rng.integers(0, 25, C).astype(np.int32)
    customer = pd.DataFrame({
        "c_custkey": ck, "c_name": ["Customer#%09d" % k for k in ck.tolist()],
        "c_address": _text(rng, C, 10, 40), "c_nationkey": c_nat,
        "c_phone": _phones(rng, c_nat), "c_acctbal": _money(rng, C, -999.99, 9999.99),
        "c_mktsegment": [SEGMENTS[i] for i in rng.integers(0, 5, C).tolist()],
        "c_comment": _text(rng, C, 29, 116)})

    # orders (customer keys not divisible by 3)
    idx = np.arange(O, dtype=np.int64)
    okey = (idx // 8) * 32 + (idx % 8) + 1
    eligible = ck[ck % 3 != 0]
    o_cust = eligible[rng.integers(0, len(eligible), O)]
    span = int((END - np.timedelta64(151, "D") - START).astype(int))
    o_date = START + rng.integers(0, span + 1, O).astype("timedelta64[D]")

    # lineitem
    nlines = rng.integers(1, 8, O)
    L = int(nlines.sum())
    l_order_pos = np.repeat(idx, nlines)
    first = np.cumsum(nlines) - nlines
    l_line = (np.arange(L) - np.repeat(first, nlines) + 1).astype(np.int32)
    l_part = rng.integers(1, P + 1, L)
    l_supp = _suppliers_of(l_part, rng.integers(0, 4, L), S)
    qty = rng.integers(1, 51, L).astype(np.float64)
    price = np.round(qty * np.round(retail[l_part - 1], 2), 2)
    disc = rng.integers(0, 11, L) / 100.0
    tax = rng.integers(0, 9, L) / 100.0
    od = o_date[l_order_pos]
    ship = od + rng.integers(1, 122, L).astype("timedelta64[D]")
    commit = od + rng.integers(30, 91, L).astype("timedelta64[D]")
    receipt = ship + rng.integers(1, 31, L).astype("timedelta64[D]")
    ra = np.where(rng.integers(0, 2, L) == 0, "R", "A")
    rflag = np.where(receipt <= CURRENT, ra, "N")
    lstatus = np.where(ship > CURRENT, "O", "F")
    lineitem = pd.DataFrame({
        "l_orderkey": okey[l_order_pos], "l_partkey": l_part, "l_suppkey": l_supp,
        "l_linenumber": l_line, "l_quantity": qty, "l_extendedprice": price,
        "l_discount": disc, "l_tax": tax, "l_returnflag": rflag.astype(object),
        "l_linestatus": lstatus.astype(object),
        "l_shipdate": _as_dates(ship), "l_commitdate": _as_dates(commit),
        "l_receiptdate": _as_dates(receipt),
        "l_shipinstruct": [INSTRUCTIONS[i] for i in rng.integers(0, 4, L).tolist()],
        "l_shipmode": [MODES[i] for i in rng.integers(0, 7, L).tolist()],
        "l_comment": _text(rng, L, 10, 43)})

    charge = price * (1 + tax) * (1 - disc)
    total = np.round(np.bincount(l_order_pos, weights=charge, minlength=O), 2)
    n_f = np.bincount(l_order_pos, weights=(lstatus == "F").astype(np.float64), minlength=O)
    status = np.where(n_f == nlines, "F", np.where(n_f == 0, "O", "P"))
    orders = pd.DataFrame({
        "o_orderkey": okey, "o_custkey": o_cust, "o_orderstatus": status.astype(object),
        "o_totalprice": total, "o_orderdate": _as_dates(o_date),
        "o_orderpriority": [PRIORITIES[i] for i in rng.integers(0, 5, O).tolist()],
        "o_clerk": ["Clerk#%09d" % k for k in rng.integers(1, max(int(1000 * sf), 1) + 1, O).tolist()],
        "o_shippriority": np.zeros(O, dtype=np.int32),
        "o_comment": _text(rng, O, 19, 78)})

    return {"region": region, "nation": nation, "supplier": supplier, "customer": customer,
            "part": part, "partsupp": partsupp, "orders": orders, "lineitem": lineitem}


TABLES = ["region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem"]


def generate(sf: float = 0.01, seed: int = 0) -> Dict[str, pd.DataFrame]:
    """The 8 tables at scale factor `sf` (own generator; dbgen is not used here)."""
    return generate_python(sf, seed)


def make_batches(tables: Dict[str, pd.DataFrame], n_batches: int = 4,
                 delete_fraction: float = 0.05, seed: int = 0
                 ) -> List[Tuple[str, str, pd.DataFrame]]:
    """Insert batches that keep orders and their lineitems together (orders
    split by o_orderdate ranges); dimension tables go in the first batch.
    After each later batch, delete `delete_fraction` of the live orders
    together with their lineitems, and the same fraction of customers/parts
    (leaving dangling references, which the queries must tolerate)."""
    rng = np.random.default_rng(seed)
    ops: List[Tuple[str, str, pd.DataFrame]] = []
    o = tables["orders"].sort_values(["o_orderdate", "o_orderkey"], kind="stable")
    groups = np.array_split(np.arange(len(o)), n_batches)
    li = tables["lineitem"]
    live_orders = np.zeros(0, dtype=np.int64)
    live_dim = {t: np.arange(len(tables[t])) for t in ("customer", "part")}
    for b, g in enumerate(groups):
        if b == 0:
            for t in ("region", "nation", "supplier", "customer", "part", "partsupp"):
                ops.append(("insert", t, tables[t]))
        ob = o.iloc[g]
        ops.append(("insert", "orders", ob.reset_index(drop=True)))
        ops.append(("insert", "lineitem",
                    li[li["l_orderkey"].isin(ob["o_orderkey"])].reset_index(drop=True)))
        live_orders = np.concatenate([live_orders, ob["o_orderkey"].to_numpy()])
        if b > 0 and delete_fraction > 0:
            k = int(round(len(live_orders) * delete_fraction))
            pos = rng.choice(len(live_orders), size=k, replace=False)
            gone = live_orders[pos]
            live_orders = np.delete(live_orders, pos)
            ops.append(("delete", "lineitem",
                        li[li["l_orderkey"].isin(gone)].reset_index(drop=True)))
            od = tables["orders"]
            ops.append(("delete", "orders", od[od["o_orderkey"].isin(gone)].reset_index(drop=True)))
            for t in ("customer", "part"):
                k = int(round(len(live_dim[t]) * delete_fraction / 4))
                if k:
                    pos = rng.choice(len(live_dim[t]), size=k, replace=False)
                    ops.append(("delete", t, tables[t].iloc[live_dim[t][pos]].reset_index(drop=True)))
                    live_dim[t] = np.delete(live_dim[t], pos)
    return ops


def _main():
    ap = argparse.ArgumentParser(description="TPC-H-shaped data generator")
    ap.add_argument("--sf", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--format", choices=["parquet", "csv"], default="parquet")
    a = ap.parse_args()
    t = generate(a.sf, a.seed)
    for name, df in t.items():
        print(f"{name}: {len(df)} rows")
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            p = os.path.join(a.out, f"{name}.{a.format}")
            df.to_parquet(p, index=False) if a.format == "parquet" else df.to_csv(p, index=False)


if __name__ == "__main__":
    _main()
